"""scenarios/shared_kv.toml, a layer that reuses an earlier layer's K and V, against an independent NumPy computation,
and the one-line errors of [shared_kv] (docs/scenario-format.md).

The computation below reads the file with tomllib and does what transformers' Gemma3nTextAttention does for a
sharing layer, without the norms and RoPE the built-in leaves out: Q = X·W_Q per query head, the K and V the table
gives (one K/V head for both query heads), scores not scaled, the causal mask, softmax, weights·V.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.cost import kv_cache
from qkv_tui.core.scenario import ScenarioError, parse_scenario
from qkv_tui.edges.export_json import to_json
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.teach.trace import Trace

FILE = Path(__file__).resolve().parents[1] / "scenarios" / "shared_kv.toml"


def _numpy() -> np.ndarray:
    doc = tomllib.loads(FILE.read_text(encoding="utf-8"))
    X = np.array(doc["X"], float)
    W_Q = np.array(doc["attention"]["W_Q"], float)
    K, V = np.array(doc["shared_kv"]["K"][0], float), np.array(doc["shared_kv"]["V"][0], float)
    n = len(X)
    outs = []
    for h in range(2):
        Q = X @ W_Q[:, 2 * h:2 * h + 2]
        s = Q @ K.T
        s[np.triu_indices(n, 1)] = -np.inf
        w = np.exp(s - s.max(axis=1, keepdims=True))
        outs.append((w / w.sum(axis=1, keepdims=True)) @ V)
    return np.concatenate(outs, axis=1)


def test_the_builtin_is_what_numpy_computes() -> None:
    comp = compute(load_scenario(FILE))
    np.testing.assert_allclose(comp.output, _numpy(), rtol=1e-12, atol=1e-12)
    doc = json.loads(to_json(comp))
    assert doc["kv_source_layer"] == 2
    assert [h["W_K"] for h in doc["heads"]] == [None, None] and doc["heads"][1]["K"] == [[1, 1], [1, -1], [-1, 1]]
    cache = kv_cache(comp.scenario, 2, 8)
    assert [lc.per_token.value for lc in cache.layers] == [0]  # it stores nothing of its own


def test_the_stages_say_where_k_and_v_come_from() -> None:
    trace = Trace(compute(load_scenario(FILE)))
    assert trace.stage_keys[:4] == ["embed", "project", "reuse", "score"]
    project = [s for s in trace.segments if s.stage == "project"]
    assert [s.target for s in project] == ["Q", "Q"]  # each head projects its Queries only
    reuse = [s for s in trace.segments if s.stage == "reuse"]
    assert [(s.head, s.target) for s in reuse] == [(0, "K"), (0, "V"), (1, "K"), (1, "V")]  # each head: what it reads
    op = trace.op(reuse[0].start + 3)  # K[cat,1]
    assert op.arithmetic == "K[cat,1] = layer 2's K[cat,1] = -1"
    assert "reused, not computed here" in op.details[0]
    assert "not computed here" in trace.specs[2].meaning(trace, 0)
    page = to_markdown(compute(load_scenario(FILE)))
    assert "K and V are reused from layer 2, not computed here" in page and "W_K:" not in page


def test_written_back_it_loads_to_the_same_numbers() -> None:
    comp = compute(load_scenario(FILE))
    text = to_toml(comp.scenario)
    assert "\nW_K =" not in text and "\nW_V =" not in text
    again = compute(parse_scenario(text, "again.toml"))
    np.testing.assert_array_equal(again.output, comp.output)


BASE = FILE.read_text(encoding="utf-8")


@pytest.mark.parametrize(("change", "said"), [
    (lambda s: s.replace("# no W_K", "W_K = [[1, 0], [0, 1], [1, 1], [0, 0]]\n# no W_K"),
     "[attention] gives W_K, but [shared_kv] says this layer reuses layer 2's K and V"),
    (lambda s: s.replace("source_layer = 2\n", ""), "[shared_kv] is missing 'source_layer'"),
    (lambda s: s.replace("source_layer = 2", "source_layer = -1"), "[shared_kv] source_layer = -1"),
    (lambda s: s.replace("source_layer = 2", "source_layer = 1.5"), "source_layer must be a whole number"),
    (lambda s: s.replace("    [-1, 1],   # sat\n", "", 1), "[shared_kv] K[0] is 2 × 2; expected m × d_k = 3 × 2"),
    (lambda s: s.replace("[1, -1],   # sat\n", "[1, -1, 0],   # sat\n"), "[shared_kv] V[0] is ragged"),
    (lambda s: re.sub(r"\nK = \[.*?\n\]\n", "\nK = 3\n", s, count=1, flags=re.DOTALL),
     "[shared_kv] K must be a list of 1 matrix"),
    (lambda s: s + '\n[input]\nkind = "altup"\nlayer = 2\n', "but [input] says this is layer 2; expected an earlier"),
    (lambda s: s + '\n[input]\nkind = "altup"\nlayer = 4\nschedule = ["full", "full", "full", "full", "full kv-from 1"]\n',
     "expected it to end with ' kv-from 2'"),
    (lambda s: s + "\n[v_norm]\n", "[shared_kv] cannot be used with [v_norm]"),
    (lambda s: s + '\n[context]\ntokens = ["a", "b", "c"]\nX = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]\n',
     "[shared_kv] cannot be used with [context]"),
])
def test_bad_tables_are_one_line(change, said: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ScenarioError) as e:
        compute(parse_scenario(change(BASE), "bad.toml"))
    message = str(e.value)
    assert said in message and "\n" not in message, message


def test_the_cli_refuses_in_one_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.toml"
    path.write_text(BASE.replace("source_layer = 2", "source_layer = true"), encoding="utf-8")
    run = cli("--check", str(path))
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1 and run.err.startswith("error:"), run.err


def test_the_editor_offers_w_q_but_no_w_k_or_w_v() -> None:
    from qkv_tui.core.cell_edit import input_cells, parse_address

    sc = load_scenario(FILE)
    names = {cell.matrix for cell in input_cells(sc)}
    assert "W_Q" in names and not names & {"W_K", "W_V", "b_K", "b_V"}
    cell, _ = parse_address(sc, "W_K[0,0]")
    assert cell is None


# The built-in with Gemma 3n's Q path put back: q_norm (γ of its own) and RoPE "half" on Q; the reused K arrives
# normed and turned already, so neither touches it.
TURNED = BASE.replace('\n[shared_kv]\n', '\n[qk_norm]\nover = "head"\ngamma_q = [1.5, 0.5]\n\n'
                      '[rope]\nlayout = "half"\nbase = 10000\n\n[shared_kv]\n')


def _turned_numpy() -> np.ndarray:
    doc = tomllib.loads(TURNED)
    X, W_Q = np.array(doc["X"], float), np.array(doc["attention"]["W_Q"], float)
    K, V = np.array(doc["shared_kv"]["K"][0], float), np.array(doc["shared_kv"]["V"][0], float)
    gamma, n = np.array(doc["qk_norm"]["gamma_q"], float), len(X)
    angle = np.arange(n)[:, None] * 1.0  # d_k = 2: one pair, θ₀ = base⁰ = 1
    outs = []
    for h in range(2):
        q = X @ W_Q[:, 2 * h:2 * h + 2]
        q = q / np.sqrt(np.mean(q * q, axis=1, keepdims=True) + 1e-6) * gamma
        q = q * np.cos(angle) + np.concatenate([-q[:, 1:], q[:, :1]], axis=1) * np.sin(angle)  # rotate_half
        s = q @ K.T
        s[np.triu_indices(n, 1)] = -np.inf
        w = np.exp(s - s.max(axis=1, keepdims=True))
        outs.append((w / w.sum(axis=1, keepdims=True)) @ V)
    return np.concatenate(outs, axis=1)


def test_q_is_normed_and_turned_and_the_reused_k_is_not() -> None:
    from qkv_tui.teach.handcalc import compute_hand

    from .test_calculator import assert_holds, check_text, explanation_text

    comp = compute(parse_scenario(TURNED, "turned.toml"))
    np.testing.assert_allclose(comp.output, _turned_numpy(), rtol=1e-12, atol=1e-12)
    trace = Trace(comp)
    targets = [(s.stage, s.target) for s in trace.segments]
    assert ("qk_norm", "Q_norm") in targets and ("rotate", "Q_rot") in targets
    assert not {("qk_norm", "K_norm"), ("rotate", "K_rot"), ("project", "K")} & set(targets)
    assert "Q alone is normed and turned by RoPE here" in trace.specs[trace.stage_keys.index("reuse")].meaning(trace, 0)
    from qkv_tui.display.view import View

    assert_holds(check_text(explanation_text(View(trace), 3)))
    for decimals in (2, 3):  # by hand, each step rounded before the next
        hand = compute_hand(comp, decimals)
        np.testing.assert_array_equal(hand.heads[0].K, comp.heads[0].K)
        assert_holds(check_text(explanation_text(View(Trace(hand)), decimals), whole=False))


HEADS = """\
tokens = ["a", "b"]
X = [[1, 0], [0, 1]]
mask = "causal"
[[heads]]
W_Q = [[1, 0], [0, 1]]
[[heads]]
W_Q = [[0, 1], [1, 0]]
kv_head = 0
[shared_kv]
source_layer = 0
K = [[[1, 0], [0, 1]]]
V = [[[1, 2], [3, 4]]]
"""


def test_heads_tables_give_w_q_alone_and_name_their_kv_head() -> None:
    comp = compute(parse_scenario(HEADS, "heads.toml"))
    K, V = np.array([[1.0, 0], [0, 1]]), np.array([[1.0, 2], [3, 4]])
    for h, W_Q in enumerate((np.eye(2), np.array([[0.0, 1], [1, 0]]))):
        s = (np.eye(2) @ W_Q) @ K.T / np.sqrt(2)
        s[0, 1] = -np.inf
        w = np.exp(s - s.max(axis=1, keepdims=True))
        np.testing.assert_allclose(comp.heads[h].output, (w / w.sum(axis=1, keepdims=True)) @ V, rtol=1e-12)
    again = compute(parse_scenario(to_toml(comp.scenario), "again.toml"))
    np.testing.assert_array_equal(again.output, comp.output)
    with pytest.raises(ScenarioError, match=r"K must be a list of 2 matrices, one per K/V head .* got 1 matrix$"):
        parse_scenario(HEADS.replace("kv_head = 0\n", ""), "two.toml")
