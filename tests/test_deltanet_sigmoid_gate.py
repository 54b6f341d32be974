"""[deltanet]'s ``gate_o``: which activation gates the output norm, silu (Qwen3-Next, the default) or sigmoid
(Kimi Linear's KimiLinearRMSNormGated: rmsnorm(o)·γ·σ(z)).

Wrong values are one line; the TOML export writes the key back (and leaves it out where it is the default, so old
files export as before); the engine's gated norm agrees with a NumPy computation written here from the rule's own o;
the Output norm stage says σ and every line of it re-computes on the calculator, exact and by hand, on screen and
in the markdown export; the JSON export names the gate; --check says it.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.view import View
from qkv_tui.kernels.deltanet import DeltaForward
from qkv_tui.kernels.deltanet_parts import Around
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text, explanation_text
from .test_deltanet_io import WITH_IO

SIGMOID = WITH_IO + 'gate_o = "sigmoid"\n'
W_Z = np.array([[1, 0], [0, 1], [0.5, 0.5], [-1, 0]])
GAMMA = np.array([1.5, 0.5])

CASES = {
    "unknown": (WITH_IO + 'gate_o = "tanh"\n', "[deltanet] gate_o = 'tanh'; expected \"silu\" (Qwen3-Next's gated"
                                               " norm, the default) or \"sigmoid\" (Kimi Linear's)"),
    "not_a_string": (WITH_IO + "gate_o = 1\n", "[deltanet] gate_o = 1; expected \"silu\""),
    "without_w_z": (WITH_IO.replace("W_Z = [[1, 0], [0, 1], [0.5, 0.5], [-1, 0]]\ngamma_o = [1.5, 0.5]\n", "")
                    + 'gate_o = "sigmoid"\n', "[deltanet] has gate_o but no W_Z; expected W_Z"),
    "typo": (WITH_IO + 'gate_0 = "sigmoid"\n', "unknown key 'gate_0' in [deltanet]; did you mean 'gate_o'?"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_wrong_value_is_one_line(case: str, cli: Any, write: Any) -> None:
    text, expected = CASES[case]
    path = write(text)
    run = cli("--check", str(path))
    assert (run.code, run.out) == (2, ""), run.err
    assert run.err.count("\n") == 1 and run.err.startswith(f"error: {path}: ") and "Traceback" not in run.err
    assert expected in run.err, run.err


def test_it_parses_and_defaults_to_silu() -> None:
    sc = parse_scenario(SIGMOID, "s.toml")
    assert sc.deltanet is not None and sc.deltanet.io is not None and sc.deltanet.io.gate_o == "sigmoid"
    plain = parse_scenario(WITH_IO, "p.toml").deltanet
    assert plain is not None and plain.io is not None and plain.io.gate_o == "silu"
    explicit = parse_scenario(WITH_IO + 'gate_o = "silu"\n', "e.toml").deltanet
    assert explicit is not None and explicit.io is not None and explicit.io.gate_o == "silu"


def test_the_gated_norm_agrees_with_numpy_from_the_rules_o() -> None:
    """out = o / √(mean(o²) + 1e-6)·γ·σ(X̂·W_Z), computed here from the head's o; silu's would differ."""
    comp = compute(parse_scenario(SIGMOID, "s.toml"))
    sc, hr = comp.scenario, comp.heads[0]
    o = hr.need(DeltaForward).output  # (n, d_v): the rule's o, checked against a plain loop in test_deltanet_io.py
    z = sc.X @ W_Z  # no [norm]: the projections read X
    normed = o / np.sqrt((o ** 2).mean(axis=1, keepdims=True) + 1e-6) * GAMMA
    want = normed / (1.0 + np.exp(-z))
    around = hr.need(Around).out_norm
    assert around is not None and around.gate == "sigmoid"
    np.testing.assert_allclose(around.out, want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(comp.output, want, rtol=1e-12, atol=1e-15)  # one head, no W_O: what Concat joins
    silu = compute(parse_scenario(WITH_IO, "p.toml")).output
    np.testing.assert_allclose(silu, normed * z / (1.0 + np.exp(-z)), rtol=1e-12, atol=1e-15)
    assert not np.allclose(silu, want)


@pytest.mark.parametrize("decimals", [1, 2, 3, 5, 8])
def test_the_stage_says_sigmoid_and_every_line_checks_out(decimals: int) -> None:
    comp = compute(parse_scenario(SIGMOID, "s.toml"))
    view = View(Trace(comp))
    text = explanation_text(view, decimals)
    onorm = [line for line in text.splitlines() if line.lstrip().startswith("out[")]
    assert onorm and all("σ(z[" in line and "silu" not in line for line in onorm)
    assert_holds(check_text(text))
    if decimals <= 4:  # by hand each step is rounded before the next: each "=" holds, not first-to-last
        hand = compute_hand(comp, decimals)
        assert_holds(check_text(explanation_text(View(Trace(hand)), decimals), whole=False))


def test_toml_round_trip_json_and_check(cli: Any, write: Any) -> None:
    path = write(SIGMOID)
    toml = cli("--export", "toml", str(path))
    assert toml.code == 0 and 'gate_o = "sigmoid"' in toml.out
    again = write(toml.out, "again.toml")
    first, second = cli("--export", "json", str(path)), cli("--export", "json", str(again))
    assert first.code == 0 and first.out == second.out
    head = json.loads(first.out)["deltanet"]["heads"][0]
    assert head["gate_o"] == "sigmoid"
    silu = write(WITH_IO, "silu.toml")
    assert 'gate_o' not in cli("--export", "toml", str(silu)).out  # the default is not written: old files unchanged
    assert json.loads(cli("--export", "json", str(silu)).out)["deltanet"]["heads"][0]["gate_o"] == "silu"
    assert "a gated output norm (σ gate)" in cli("--check", str(path)).out
    markdown = cli("--export", "markdown", str(path)).out
    assert "out[I,0] = ô[I,0]·σ(z[I,0]) = " in markdown
    assert_holds(check_text(markdown))
