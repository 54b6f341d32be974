"""[differential] read backwards on the worksheet (edges/worksheet/backward/differential.py).

Every backward and SGD blank's key line checks out on a calculator (tests/arith_check.py) and reads only numbers
printed before its table (or earlier blanks); its answer is kernels/differential_backward.py's gradient on the page's
printed forward pass; at six decimals the page's λ-vector, weight and input gradients and its SGD step are
torch.autograd's on a forward written from contracts §14 (tests/test_differential_scenario_grads_torch.py), within
the drift of rounding; ``--stages`` reaches each of the app's differential backward stages.
"""

from __future__ import annotations

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.fmt import fmt
from qkv_tui.core.gradients import gradients
from qkv_tui.core.scenario import Scenario, load_scenario, parse_scenario
from qkv_tui.edges.worksheet.backward.differential import line as diff_line
from qkv_tui.edges.worksheet.backward.tables import SHEET, PageBackward, printed_computation
from qkv_tui.edges.worksheet.make import Worksheet, build
from qkv_tui.edges.worksheet.sgd import SHEET as SGD
from qkv_tui.teach.stages.printed import PrintedChain
from qkv_tui.teach.trace import Trace

from .arith_check import check
from .test_differential_scenario_grads_torch import LAMBDAS, LR, _case, _torch_loss
from .test_worksheet_backward_variants import Recorder

line = SHEET.worksheet_line  # the answer key's line as the page writes it: the Loss's own first, then the chain's

# (seed, num_heads, num_kv_heads, d, rope, biases, sub-norm gains): small enough for a worksheet (≤ 16 terms a sum),
# with every sub-norm's ms above 0.2 (a smaller one magnifies the page's rounding past what these tests allow)
GENERATED = {"grouped_gains_biases": (2, 2, 1, 2, False, True, True), "two_kv_heads_gains": (1, 2, 2, 2, False, False, True),
             "no_gains_d3": (1, 2, 1, 3, False, True, False), "one_head": (2, 1, 1, 2, False, True, True)}


CROSS = '''
tokens = ["a", "b"]
X = [[1, 0], [0, 1]]

[context]
tokens = ["x", "y", "z"]
X = [[1, 0, 1], [0, 1, 0], [1, 1, 0]]

[[heads]]
W_Q = [[1, 0, 0, 1], [0, 1, 1, 0]]
W_K = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
W_V = [[1, 0, 1, 0], [0, 1, 0, 1], [0, 0, 1, 1]]

[differential]
lambda_q1 = [[0.5, 0]]
lambda_k1 = [[0.2, 0]]
lambda_q2 = [[0, 0.5]]
lambda_k2 = [[0, -0.2]]
lambda_init = 0.2

[backward]
target = [[1, 0, 0, 0], [0, 1, 0, 0]]
'''  # Queries from X, Keys and Values from [context]: dX̂ has the Query path only


def scenario(name: str) -> Scenario:
    if name == "cross_attention":
        return parse_scenario(CROSS, "cross.toml")
    if name in GENERATED:
        return parse_scenario(_case(*GENERATED[name])[0], f"{name}.toml")
    return load_scenario(name)


def page_back(ws: Worksheet) -> tuple[object, object]:
    """The page's printed forward pass and core/gradients.py on it, under the page's policy."""
    printed = PrintedChain(ws.comp, ws.decimals)
    for spec, head in Trace(ws.comp).walk():
        printed.add(spec.worksheet_tables(printed, head))
    pcomp = printed_computation(printed)
    return pcomp, gradients(pcomp, PageBackward(ws.decimals))


def gradient(G, key: str) -> np.ndarray | None:  # type: ignore[no-untyped-def]
    """The gradient a differential backward table prints, by its key, read off DiffBack's own fields."""
    kind, _, suffix = key.partition(".")
    if not suffix:
        return None
    h = int(suffix)
    b = G.heads[h].own
    grid = {"dnormed": b.d_normed, "dmixed": b.dmixed, "dgsub": b.dgamma, "dV": b.dV, "dweights": b.dweights,
            "dlam": np.array([[b.dlambda]]), "dP2": b.map_2.dP, "ddots": np.array([[b.ddot_1, b.ddot_2]]),
            "dlamv": np.stack([b.dlambda_q1, b.dlambda_k1, b.dlambda_q2, b.dlambda_k2]),
            "D_1": b.map_1.D[:, None], "dS_1": b.map_1.dS, "dscores_1": b.map_1.dscores,
            "D_2": b.map_2.D[:, None], "dS_2": b.map_2.dS, "dscores_2": b.map_2.dscores,
            "dQu": b.dQ, "dKu": b.dK, "dW_Q": G.heads[h].dW_Q}.get(kind)
    return None if grid is None else np.atleast_2d(grid)


@pytest.mark.parametrize("name", ["differential_learns", "cross_attention", *GENERATED])
@pytest.mark.parametrize(("seed", "decimals"), [(0, 3), (1, 2), (2, 4)])
def test_every_backward_blank_checks_out_from_the_page(name: str, seed: int, decimals: int) -> None:
    ws = build(compute(scenario(name)), "100%", seed, decimals)
    assert "not written yet" not in ws.markdown() and "## Backward" in ws.markdown()
    _, G = page_back(ws)
    order = {t.key: n for n, t in enumerate(ws.tables)}
    by_key = {t.key: t for t in ws.tables}
    numbered = {(b.table, b.row, b.col): b.number for b in ws.blanks}
    work = Recorder(ws.comp.scenario, by_key, ws.decimals, ws.specs)
    kinds: set[str] = set()
    for b in ws.blanks:
        table = by_key[b.table]
        if table.stage not in ("backward", "sgd"):
            continue
        kinds.add(b.table.partition(".")[0])
        assert check(b.working) is True, b.working
        work.read = []
        again = (line if table.stage == "backward" else SGD.worksheet_line)(work, table, b.row, b.col, b.answer)
        assert again == b.working
        assert work.read or " = 0 = " in b.working, b.working
        for ref in work.read:
            assert by_key[ref[0]].given or order[ref[0]] < order[b.table], (b.working, ref)
            assert numbered.get(ref, 0) < b.number, (b.working, ref)
        want = gradient(G, b.table) if table.stage == "backward" else None
        if want is not None:
            assert b.answer == fmt(float(want[b.row, b.col]), False, decimals), (b.table, b.row, b.col)
    # every step of the app's differential backward has its blanks, and the SGD step moves the λ vectors
    assert {"dnormed", "subm", "dmixed", "dV", "dweights", "dlam", "dP2", "ddots", "dlamv", "D_1", "dS_1",
            "dscores_1", "D_2", "dS_2", "dscores_2", "dQu", "dKu", "dW_Q", "sgd"} <= kinds


def test_a_differential_line_names_its_operands() -> None:
    ws = build(compute(scenario("differential_learns")), "0")
    work = Recorder(ws.comp.scenario, {t.key: t for t in ws.tables}, ws.decimals, ws.specs)
    table = ws.table("dlamv.1")
    work.read = []
    text = diff_line(work, table, 0, 0, table.text(0, 0, ws.decimals))
    assert text.startswith("dλ_q1[0] = d(λ_q1·λ_k1)·λ_k1[0] = ")
    assert work.read == [("ddots.1", 0, 0), ("lambda_vectors.1", 1, 0)]


@pytest.mark.parametrize("name", list(GENERATED))
def test_at_six_decimals_the_page_is_autograds(name: str) -> None:
    torch = pytest.importorskip("torch")
    seed, H, KV, d, rope, bias, gamma = GENERATED[name]
    text, a = _case(seed, H, KV, d, rope, bias, gamma)
    ws = build(compute(parse_scenario(text, f"{name}.toml")), "0", decimals=6)
    t = {k: torch.tensor(v, requires_grad=k != "target") for k, v in a.items()}
    _torch_loss(t, H, KV, d, rope, a["X"].shape[0]).backward()

    def want(key: str) -> np.ndarray:
        return t[key].grad.numpy()

    def near(key: str, expected: np.ndarray) -> None:
        got = ws.table(key).values
        np.testing.assert_allclose(got, expected, rtol=0, atol=2e-3 * max(1.0, float(np.abs(expected).max())),
                                   err_msg=key)

    w = 2 * d
    grouped = KV < H
    for h in range(H):
        near(f"dlamv.{h}", np.stack([want(k)[h] for k in LAMBDAS]))
        near(f"dW_Q.{h}", want("W_Q")[:, h * w:(h + 1) * w])
        c = h * KV // H
        if not grouped:
            near(f"dW_K.{h}", want("W_K")[:, c * w:(c + 1) * w])
            near(f"dW_V.{h}", want("W_V")[:, c * w:(c + 1) * w])
        elif h * KV % H == 0:  # the first head reading a K/V head prints its sum
            near(f"kvdW_K.{h}", want("W_K")[:, c * w:(c + 1) * w])
            near(f"kvdW_V.{h}", want("W_V")[:, c * w:(c + 1) * w])
        # the SGD step: every λ vector (the default train list) moved by lr times its gradient
        new = ws.table(f"sgd.lambda_vectors.{h}").values
        np.testing.assert_allclose(new, np.stack([a[k][h] for k in LAMBDAS]) - LR * np.stack([want(k)[h] for k in LAMBDAS]),
                                   atol=1e-4)
    near("dW_O", want("W_O"))
    near("dX", want("X"))
    near("dgamma", want("gamma")[None, :])
    if gamma:
        near("dgamma_sub" if H > 1 else "dgsub.0", want("gamma_sub")[None, :])


@pytest.mark.parametrize(("stages", "kinds"), [
    ("dλ", {"ddots", "dlamv"}),
    ("dSubtract", {"dlam", "dP2"}),
    ("dSub-norm", {"subm", "dmixed"}),
    ("dSoftmax₂..dScore", {"D_2", "dS_2", "dscores_2", "dQu", "dKu"}),
    ("d(1 − λ_init)", {"dnormed"}),
])
def test_stages_ask_the_differential_tables_of_that_stage(stages: str, kinds: set[str]) -> None:
    ws = build(compute(scenario("differential_learns")), "100%", stages=stages, heads=[2])
    assert ws.asked is not None
    assert {key.partition(".")[0] for key in ws.asked} == kinds
    assert all(key.endswith(".1") for key in ws.asked)


def test_the_command_line_writes_the_backward_sheet(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "x.md"
    run = cli("differential_learns", "--export", "worksheet", "--stages", "backward", "-o", str(out))
    assert run.code == 0, run.err
    page = out.read_text(encoding="utf-8")
    assert "not written yet" not in page
    for heading in ("d_normed = (1 − λ_init)·dO_h", "dλ = −Σ dweights ⊙ p₂", "dS₂ = p₂ ⊙ (dp₂ − D₂)",
                    "dQ = [dscores₁·K₁ | dscores₂·K₂]", "new λ = λ − lr·dλ"):
        assert heading in page, heading


@pytest.mark.parametrize("stages", ["d(1 − λ_init)..dSubtract", "dSoftmax₁..dProject"])
def test_half_a_differential_heads_backward_fits_a_page_and_its_key_another(cli, tmp_path, stages: str) -> None:  # type: ignore[no-untyped-def]
    """A lesson's worth (issue 34's two pages): the whole backward of one differential head, with the forward tables
    it reads, takes two pages and its key a third (docs/worksheets.md), half its stages one and one."""
    pytest.importorskip("typst")
    from .test_worksheet_fits_two_pages import count

    out = tmp_path / "sheet.pdf"
    run = cli("--export", "worksheet", "--stages", stages, "--heads", "2", "--format", "pdf", "--key", "separate",
              "-o", str(out), "differential_learns")
    assert run.code == 0, run.err
    assert count(out.read_bytes()) + count((tmp_path / "sheet-key.pdf").read_bytes()) <= 2


LONG = '''
tokens = ["a", "b", "c", "d", "e"]
X = [[1, 0], [0, 1], [1, 1], [1, -1], [0.5, 0]]
mask = "{mask}"

[[heads]]
W_Q = [[1, 0, 0, 1], [0, 1, 1, 0]]
W_K = [[1, 0, 1, 0], [0, 1, 0, 1]]
W_V = [[1, 0, 1, 0], [0, 1, 0, 1]]

[differential]
lambda_q1 = [[0.5, 0]]
lambda_k1 = [[0.2, 0]]
lambda_q2 = [[0, 0.5]]
lambda_k2 = [[0, -0.2]]
lambda_init = 0.2

[backward]
target = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1, 1, 0, 0]]
'''


def test_a_dlambda_sum_past_what_a_page_takes_leaves_the_backward_to_the_app() -> None:
    """dλ sums a product for every cell the mask allows: 15 under a causal mask of five tokens, 25 without one."""
    causal = build(compute(parse_scenario(LONG.replace("{mask}", "causal"), "c.toml")), "100%").markdown()
    assert "dλ vectors" in causal and "do not cover" not in causal
    full = build(compute(parse_scenario(LONG.replace("{mask}", "none"), "n.toml")), "100%").markdown()
    assert "dλ vectors" not in full and "## Subtract" in full
    assert ("its backward tables do not cover [differential]'s dλ = −Σ dweights ⊙ p₂, a sum of 25 products (one for each"
            " cell the mask allows), more than the 16 terms a worksheet takes") in full


def test_the_pdf_prints_the_differential_key_on_the_key_pages_only() -> None:
    pytest.importorskip("pypdf")
    pytest.importorskip("typst")
    from .test_worksheet_backward_variants import assert_backward_key_on_key_pages_only

    assert_backward_key_on_key_pages_only(build(compute(scenario("differential_learns")), "25%"))
