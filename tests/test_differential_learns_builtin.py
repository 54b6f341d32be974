"""The built-in differential_learns: what its description says of the training run holds (the tilted head's λ
climbing to e^(1.5·0.2) − e^(−0.1) + 0.2, the plain head's zero λ vectors never moving, the loss falling), and its
target is what the heads give with the tilted head's λ_q1 = [1.5, 0] (to the 3 decimals the file writes)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.training import steps
from qkv_tui.core.variants.differential import TABLE as DIFFERENTIAL
from qkv_tui.kernels.differential import DiffForward

BUILTIN = Path(__file__).resolve().parents[1] / "scenarios" / "differential_learns.toml"


def test_the_run_is_the_one_the_description_tells() -> None:
    sc = load_scenario(BUILTIN)
    run = list(steps(sc))
    lam = [f"{s.computation.heads[1].need(DiffForward).lam.value:.3f}" for s in run]
    assert lam[:4] == ["0.400", "0.529", "0.632", "0.651"] and lam[-1] == "0.645"
    assert abs(float(lam[-1]) - (math.exp(0.3) - math.exp(-0.1) + 0.2)) < 5e-4
    assert [f"{s.loss:.3f}" for s in (run[0], run[-1])] == ["0.141", "0.000"]
    first, last = DIFFERENTIAL.of(sc), DIFFERENTIAL.of(run[-1].scenario)
    assert first is not None and last is not None
    for key in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):  # the plain head's zero vectors: no gradient
        assert not getattr(last, key)[0].any() and not getattr(run[1].grads.heads[0].own, "d" + key).any()
    desc = sc.description
    for said in ("0.400, 0.529, \\", "0.632, 0.651", "settles at 0.645", "from 0.141 to 0.000", "= 0.645, not 0.400"):
        assert said.replace(", \\", ",") in desc.replace("\n", " ") or said.rstrip(" \\") in desc


def test_the_target_is_the_tilted_heads_output_with_the_larger_lambda() -> None:
    text = (BUILTIN.parent / "differential.toml").read_text(encoding="utf-8")
    wanted = compute(parse_scenario(text.replace("lambda_q1 = [[0, 0], [0.5, 0]]", "lambda_q1 = [[0, 0], [1.5, 0]]"),
                                    "t.toml")).output
    sc = load_scenario(BUILTIN)
    assert sc.backward is not None and sc.backward.target is not None
    np.testing.assert_allclose(sc.backward.target, wanted, rtol=0, atol=5e-4)
