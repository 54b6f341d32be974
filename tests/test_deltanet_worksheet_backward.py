"""[deltanet] read backwards on the worksheet (edges/worksheet/backward/deltanet.py, issue 34).

Every backward and SGD blank's key line checks out on a calculator (tests/arith_check.py) and reads only numbers
printed before its table (or earlier blanks); its answer is kernels/deltanet_backward.py's gradient on the page's
printed forward pass (core/gradients.py under the page's policy); with many decimals the page's gradients are the
engine's exact ones, and those are torch.autograd's on the gated delta rule written here as a loop over the tokens
(Yang et al. 2024; transformers' ``torch_recurrent_gated_delta_rule``), not read from the app.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.fmt import fmt
from qkv_tui.core.gradients import gradients
from qkv_tui.core.scenario import Scenario, load_scenario, parse_scenario
from qkv_tui.edges.worksheet.backward.tables import SHEET, PageBackward, printed_computation
from qkv_tui.edges.worksheet.make import Worksheet, WorksheetError, build
from qkv_tui.edges.worksheet.sgd import SHEET as SGD
from qkv_tui.kernels.deltanet_backward import DeltaBack, GatesBack
from qkv_tui.teach.stages.printed import PrintedChain
from qkv_tui.teach.trace import Trace

from .arith_check import check
from .test_worksheet_backward_variants import Recorder
from .test_worksheet_stages_and_heads import check_questions_read_the_page

line = SHEET.worksheet_line  # the answer key's line as the page writes it: the Loss's own first, then the chain's


def _rows(a: np.ndarray) -> str:
    return "[" + ", ".join("[" + ", ".join(repr(float(x)) for x in row) + "]" for row in np.atleast_2d(a)) + "]"


def case(seed: int, heads: int = 1, d_k: int = 2, d_v: int = 2, g_given: bool = False, beta_given: bool = False,
         norm: bool = False, n: int = 3, d_model: int = 4) -> tuple[str, dict[str, np.ndarray]]:
    """A small [deltanet] + [backward] scenario and its arrays (one decimal each, so a page can print them)."""
    rng = np.random.default_rng(seed)

    def r(*shape: int, scale: float = 1.0) -> np.ndarray:
        return np.round(rng.uniform(-scale, scale, shape), 1)

    a = {"X": r(n, d_model), "W_Q": r(heads, d_model, d_k), "W_K": r(heads, d_model, d_k),
         "W_V": r(heads, d_model, d_v), "W_a": r(d_model, heads, scale=0.6), "A_log": r(heads, scale=0.5),
         "dt_bias": r(heads), "W_b": r(d_model, heads), "target": r(n, heads * d_v),
         "g": -np.round(rng.uniform(0.1, 0.9, (n, heads)), 1), "beta": np.round(rng.uniform(0.3, 0.9, (n, heads)), 1)}
    tokens = ", ".join(f'"t{i}"' for i in range(n))
    text = f'tokens = [{tokens}]\nX = {_rows(a["X"])}\nmask = "causal"\n'
    if norm:
        text += f'\n[norm]\nkind = "rms"\ngamma = {[1.0] * d_model}\neps = 1e-5\n'
    for h in range(heads):
        text += (f'\n[[heads]]\nname = "head {h + 1}"\nW_Q = {_rows(a["W_Q"][h])}\nW_K = {_rows(a["W_K"][h])}\n'
                 f'W_V = {_rows(a["W_V"][h])}\n')
    text += "\n[deltanet]\n"
    text += f'g = {_rows(a["g"])}\n' if g_given else (f'W_a = {_rows(a["W_a"])}\nA_log = {list(map(float, a["A_log"]))}\n'
                                                    f'dt_bias = {list(map(float, a["dt_bias"]))}\n')
    text += f'beta = {_rows(a["beta"])}\n' if beta_given else f'W_b = {_rows(a["W_b"])}\n'
    text += f'\n[backward]\ntarget = {_rows(a["target"])}\nlr = 0.5\n'
    return text, a


GENERATED = {"two_heads": (3, 2), "d_k3_d_v2": (4, 1, 3, 2), "beta_given": (5, 1, 2, 2, False, True),
             "g_given": (6, 1, 2, 2, True, False), "both_given": (7, 1, 2, 2, True, True),
             "pre_norm": (8, 1, 2, 2, False, False, True)}


def scenario(name: str) -> Scenario:
    if name in GENERATED:
        return parse_scenario(case(*GENERATED[name])[0], f"{name}.toml")  # type: ignore[arg-type]
    return load_scenario(name)


def page_back(ws: Worksheet) -> tuple[object, object]:
    """The page's printed forward pass and core/gradients.py on it, under the page's policy."""
    printed = PrintedChain(ws.comp, ws.decimals)
    for spec, head in Trace(ws.comp).walk():
        printed.add(spec.worksheet_tables(printed, head))
    pcomp = printed_computation(printed)
    return pcomp, gradients(pcomp, PageBackward(ws.decimals))


def gradient(G, key: str, width: int) -> np.ndarray | None:  # type: ignore[no-untyped-def]
    """The gradient a delta-rule backward table prints, by its key, read off the kernels' own records; nan in the
    columns that hold no gradient of the kernels' (m, a, σ(a)); ``width`` the table's."""
    kind, _, rest = key.partition(".")
    parts = rest.split(".")
    if not parts[0].isdigit():
        return None
    h = int(parts[0])
    b = G.heads[h].part(DeltaBack)
    gb = G.part(GatesBack)
    n = b.dq.shape[0]
    grid = {"dnb_qk": np.concatenate([b.dq, b.dk], axis=1),
            "dV": np.concatenate([b.dv, b.dbeta[:, None], b.dg[:, None]], axis=1),
            "dQu": b.dQ_used, "dKu": b.dK_used, "dW_Q": G.heads[h].dW_Q, "dW_K": G.heads[h].dW_K,
            "dW_V": G.heads[h].dW_V}.get(kind)
    if kind == "dnb_tok":
        t = int(parts[1])
        grid = np.concatenate([b.dS[t], b.ddelta[t][None, :]])
    if kind == "dnb_dW":
        grid = np.stack([g[:, h] for g in (gb.dW_a, gb.dW_b) if g is not None])
    if kind == "dnb_rate":
        grid = np.array([[gb.dA_log[h], gb.ddt_bias[h]]])
    if kind == "dnb_gates":  # a and σ(a) first, where g is computed
        cols = [c[:, h] for c in (gb.da, gb.db) if c is not None]
        grid = np.concatenate([np.full((n, width - len(cols)), np.nan), np.stack(cols, axis=1)], axis=1)
    if grid is None:
        return None
    grid = np.atleast_2d(grid)
    return np.concatenate([grid, np.full((grid.shape[0], width - grid.shape[1]), np.nan)], axis=1)


NAMES = ["deltanet_learns", *GENERATED]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("seed", "decimals"), [(0, 3), (1, 2), (2, 4)])
def test_every_backward_blank_checks_out_from_the_page(name: str, seed: int, decimals: int) -> None:
    ws = build(compute(scenario(name)), "100%", seed, decimals)
    page = ws.markdown()
    assert "## Backward" in page and "forward pass only" not in page
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
        assert work.read, b.working
        for ref in work.read:  # printed before the table, or earlier in it (a token's dδ reads its dS)
            assert by_key[ref[0]].given or order[ref[0]] <= order[b.table], (b.working, ref)
            if ref[0] == b.table:
                assert (ref[1], ref[2]) < (b.row, b.col), (b.working, ref)
            assert numbered.get(ref, 0) < b.number, (b.working, ref)
        want = gradient(G, b.table, table.values.shape[1]) if table.stage == "backward" else None
        if want is not None and not np.isnan(want[b.row, b.col]):
            assert b.answer == fmt(float(want[b.row, b.col]), False, decimals), (b.table, b.row, b.col)
    sc = ws.comp.scenario
    assert sc.deltanet is not None
    want_kinds = {"dO", "dnb_tok", "dnb_qk", "dnb_m", "dV", "dQu", "dKu", "dW_Q", "dW_K", "dW_V", "dX_in", "sgd"}
    if sc.deltanet.g is None or sc.deltanet.beta is None:
        want_kinds |= {"dnb_gates", "dnb_dW"}
    if sc.deltanet.g is None:
        want_kinds.add("dnb_rate")
    if sc.norm is not None:
        want_kinds |= {"dX"}
    assert want_kinds <= kinds, want_kinds - kinds


def test_the_first_tokens_dg_is_printed_not_asked() -> None:
    """dg of the first token is 0 (its state was empty): printed, never a blank."""
    ws = build(compute(load_scenario("deltanet_learns")), "100%")
    assert all(not (b.table == "dV.0" and b.row == 0 and b.col == 3) for b in ws.blanks)
    assert ws.table("dV.0").values[0, 3] == 0 and ws.table("dV.0").cols == ("0", "1", "dβ", "dg")


def _torch_loss(t, a: dict[str, np.ndarray], heads: int, g_given: bool, beta_given: bool):  # type: ignore[no-untyped-def]
    """½·Σ (output − target)² of the gated delta rule, token by token, every head (no norm, no W_O)."""
    import torch

    X = t["X"]
    a_in = X @ t["W_a"] + t["dt_bias"]  # (n, H)
    g = torch.tensor(a["g"]) if g_given else -torch.exp(t["A_log"]) * torch.nn.functional.softplus(a_in)
    beta = torch.tensor(a["beta"]) if beta_given else torch.sigmoid(X @ t["W_b"])
    outs = []
    for h in range(heads):
        Q, K, V = X @ t["W_Q"][h], X @ t["W_K"][h], X @ t["W_V"][h]
        d_k = Q.shape[1]
        q = Q / torch.sqrt((Q * Q).sum(dim=1, keepdim=True) + 1e-6) / d_k ** 0.5
        k = K / torch.sqrt((K * K).sum(dim=1, keepdim=True) + 1e-6)
        S = torch.zeros(d_k, V.shape[1], dtype=torch.float64)
        rows = []
        for step in range(X.shape[0]):
            S = S * torch.exp(g[step, h])
            kv = S.T @ k[step]
            delta = (V[step] - kv) * beta[step, h]
            S = S + torch.outer(k[step], delta)
            rows.append(S.T @ q[step])
        outs.append(torch.stack(rows))
    out = torch.cat(outs, dim=1)
    return 0.5 * ((out - torch.tensor(a["target"])) ** 2).sum()


TORCH_CASES = {"learns": None, "two_heads": (3, 2), "d_k3_d_v2": (4, 1, 3, 2), "beta_given": (5, 1, 2, 2, False, True),
               "g_given": (6, 1, 2, 2, True, False)}


def _learns_arrays() -> dict[str, np.ndarray]:
    sc = load_scenario("deltanet_learns")
    dn = sc.deltanet
    assert dn is not None and sc.backward is not None
    h = sc.heads[0]
    return {"X": sc.X, "W_Q": h.W_Q[None], "W_K": h.W_K[None], "W_V": h.W_V[None], "W_a": dn.W_a, "A_log": dn.A_log,
            "dt_bias": dn.dt_bias, "W_b": dn.W_b, "target": sc.backward.target}


@pytest.mark.parametrize("name", list(TORCH_CASES))
def test_the_page_is_the_engine_and_the_engine_is_autograd(name: str) -> None:
    torch = pytest.importorskip("torch")
    spec = TORCH_CASES[name]
    if spec is None:
        sc, a, heads, g_given, beta_given = load_scenario("deltanet_learns"), _learns_arrays(), 1, False, False
    else:
        text, a = case(*spec)  # type: ignore[arg-type]
        sc = parse_scenario(text, f"{name}.toml")
        heads = spec[1] if len(spec) > 1 else 1
        g_given, beta_given = (spec[4], spec[5]) if len(spec) > 5 else (False, False)
    wanted = ("X", "W_Q", "W_K", "W_V", "W_a", "A_log", "dt_bias", "W_b")
    t = {k: torch.tensor(np.asarray(a[k], dtype=np.float64), requires_grad=True) for k in wanted}
    _torch_loss(t, a, heads, g_given, beta_given).backward()

    def auto(key: str) -> np.ndarray:
        return t[key].grad.numpy()

    comp = compute(sc)
    G = gradients(comp)  # the engine's, exact
    tol = {"rtol": 1e-7, "atol": 1e-9}
    for h in range(heads):
        np.testing.assert_allclose(G.heads[h].dW_Q, auto("W_Q")[h], **tol)
        np.testing.assert_allclose(G.heads[h].dW_K, auto("W_K")[h], **tol)
        np.testing.assert_allclose(G.heads[h].dW_V, auto("W_V")[h], **tol)
    np.testing.assert_allclose(G.dX, auto("X"), **tol)
    gb = G.part(GatesBack)
    if not g_given:
        assert gb is not None
        np.testing.assert_allclose(gb.dW_a, auto("W_a"), **tol)
        np.testing.assert_allclose(gb.dA_log, auto("A_log"), **tol)
        np.testing.assert_allclose(gb.ddt_bias, auto("dt_bias"), **tol)
    if not beta_given:
        assert gb is not None
        np.testing.assert_allclose(gb.dW_b, auto("W_b"), **tol)
    # the page with ten decimals: each table the engine's exact gradient, to the drift of its rounding
    ws = build(comp, "0", decimals=10)

    def near(key: str, expected: np.ndarray) -> None:
        """The table's first columns (dq and dk before m; dV before dβ and dg) against ``expected``."""
        got = ws.table(key).values[:, :expected.shape[1]]
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6, err_msg=key)

    for h in range(heads):
        b = G.heads[h].part(DeltaBack)
        assert b is not None
        for step in range(sc.n):
            near(f"dnb_tok.{h}.{step}", np.concatenate([b.dS[step], b.ddelta[step][None, :]]))
        near(f"dnb_qk.{h}", np.concatenate([b.dq, b.dk], axis=1))
        near(f"dV.{h}", np.concatenate([b.dv, b.dbeta[:, None], b.dg[:, None]], axis=1))
        near(f"dW_Q.{h}", auto("W_Q")[h])
        near(f"dW_K.{h}", auto("W_K")[h])
        near(f"dW_V.{h}", auto("W_V")[h])
        rows = [auto(k)[:, h] for k, given in (("W_a", g_given), ("W_b", beta_given)) if not given]
        if rows:
            near(f"dnb_dW.{h}", np.stack(rows))
        if not g_given:
            near(f"dnb_rate.{h}", np.array([[auto("A_log")[h], auto("dt_bias")[h]]]))
    near("dX_in", auto("X"))
    # the SGD step moves every trained weight by lr times autograd's gradient
    lr = 0.5
    for h in range(heads):
        np.testing.assert_allclose(ws.table(f"sgd.W_Q.{h}").values, a["W_Q"][h] - lr * auto("W_Q")[h], atol=1e-6)
        if not g_given:
            moved = ws.table(f"sgd.dn_rate.{h}").values[0]
            np.testing.assert_allclose(moved, [a["A_log"][h] - lr * auto("A_log")[h],
                                               a["dt_bias"][h] - lr * auto("dt_bias")[h]], atol=1e-6)


@pytest.mark.parametrize(("stages", "kinds"), [
    ("dDelta", {"dnb_tok", "dnb_qk", "dnb_m", "dV", "dQu", "dKu"}),
    ("dGates", {"dnb_gates", "dnb_rate", "dnb_dW"}),
    ("dProject", {"dW_Q", "dW_K", "dW_V"}),
    ("loss", {"dO"}),
    ("dEmbed", {"dX_in"}),
    ("sgd", {"sgd"}),
])
def test_stages_ask_the_delta_rules_tables_of_that_stage(stages: str, kinds: set[str]) -> None:
    ws = build(compute(load_scenario("deltanet_learns")), "100%", stages=stages, heads=[1])
    assert ws.asked is not None
    assert {key.partition(".")[0] for key in ws.asked} == kinds


@pytest.mark.parametrize(("name", "head"), [("deltanet_learns", 1), ("two_heads", 2), ("two_heads", 1)])
def test_a_one_head_backward_sheet_prints_what_its_questions_read(name: str, head: int) -> None:
    ws = build(compute(scenario(name)), "100%", stages="backward", heads=[head])
    check_questions_read_the_page(ws)
    h = head - 1
    printed = {t.key for t in ws.tables}
    assert {f"dn_S.{h}.0", f"dn_delta.{h}.2", f"dn_g.{h}", f"dn_W.{h}"} <= printed  # what its lines read
    assert not printed & {f"dn_decayed.{h}.1", f"dn_kv.{h}.1", f"V.{h}"}  # S' and kv come from S and δ, not read
    assert ws.asked is not None
    heads = {int(key.split(".")[1]) for key in ws.asked if key.count(".") and key.split(".")[1].isdigit()}
    assert heads == {h}  # nothing of the other head is asked
    assert ("dX_in" in ws.asked) == (len(ws.comp.scenario.heads) == 1)  # dX reads every head


def test_a_state_too_large_to_sum_by_hand_leaves_the_backward_to_the_app() -> None:
    """dg sums d_k·d_v products: 5·4 = 20 is past the 16 terms of a worksheet, so the page keeps the forward."""
    text, _ = case(9, 1, 5, 4, d_model=5)
    page = build(compute(parse_scenario(text, "big.toml")), "0").markdown()
    assert "## Backward" not in page
    assert "dg = Σ S' ⊙ dS', a sum of 20 products" in page
    with pytest.raises(WorksheetError, match="nothing to ask"):
        build(compute(parse_scenario(text, "big.toml")), stages="backward", heads=[1])


def test_the_command_line_writes_the_backward_sheet(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "x.md"
    run = cli("deltanet_learns", "--export", "worksheet", "--stages", "backward", "--heads", "1",
              "-o", str(out))
    assert run.code == 0, run.err
    page = out.read_text(encoding="utf-8")
    for heading in ("AI: dS, dδ (the last token)", "dq = S·dO, dk = dS·δ − S'·dv", "a, σ(a), da, db",
                    "dW_a = Xᵀ·da, dW_b = Xᵀ·db", "new W_a, W_b = each − lr·its gradient"):
        assert heading in page, heading


def test_the_sheet_and_its_key_take_two_pages(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 34: ``--stages backward --heads 1`` prints the sheet on one A4 page and its key on another, at 9 pt or
    more (the layout of edges/worksheet/render/typst.py; tests/test_worksheet_fits_two_pages.py for learn_to_look)."""
    pypdf = pytest.importorskip("pypdf")
    pytest.importorskip("typst")
    import io

    def count(data: bytes) -> int:
        return len(pypdf.PdfReader(io.BytesIO(data)).pages)

    out = tmp_path / "sheet.pdf"
    run = cli("--export", "worksheet", "--stages", "backward", "--heads", "1", "--format", "pdf", "--key", "separate",
              "-o", str(out), "deltanet_learns")
    assert run.code == 0, run.err
    assert count(out.read_bytes()) + count((tmp_path / "sheet-key.pdf").read_bytes()) <= 2


def test_the_sheet_and_its_key_are_set_at_nine_points_or_more() -> None:
    from qkv_tui.edges.worksheet.render import typst as typ
    from qkv_tui.edges.worksheet.sheet import sheet

    page = sheet(build(compute(load_scenario("deltanet_learns")), stages="backward", heads=[1]))
    for part in ("questions", "key"):
        sizes = [float(s) for s in re.findall(r"size: ([\d.]+)pt", typ.source(page, part))]
        assert sizes and min(sizes) >= 9.0, sizes
