"""The delta rule's unrolled map (Kimi Delta Attention's per-channel masks, Gated DeltaNet's one mask) and
[ssd]'s L multiply the decays between s and t directly: a huge log decay at one token (g = −1e17) must not
swallow a later small one, as e^(G_t − G_s) from running sums G did (−1e17 − 3.049 is −1e17 in float64, so
the mask read e^0 = 1 where the state faded by e^−3.049). Every number is checked against a plain per-token
NumPy recurrence written here; the pane that shows the map fills only once it is worked, by key token, and
the page names its tables as the lines do."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core import part_questions as ask
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.display.view import View
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.kernels.deltanet import DeltaForward, decay_mask
from qkv_tui.kernels.kda import channel_mask, channel_weights
from qkv_tui.kernels.ssd import ssd_head
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace

from .fuzz_paths import assert_every_path
from .test_calculator import assert_holds, check_text, explanation_text

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
HUGE = 1e17


def _kda_big() -> str:
    """scenarios/kda.toml with love's X row [0, 1e17, 0, 1]: channel 1's g at love is −1e17."""
    text = (SCENARIOS / "kda.toml").read_text()
    old = "  [0, 1, 0, 1],   # love"
    assert old in text
    return text.replace(old, f"  [0, {HUGE:g}, 0, 1],   # love")


def _deltanet_big() -> str:
    """scenarios/deltanet.toml with love's g −1e17 (one gate a head)."""
    text = (SCENARIOS / "deltanet.toml").read_text()
    old = "g = [[-0.5], [-0.5], [-0.5]]"
    assert old in text
    return text.replace(old, f"g = [[-0.5], [{-HUGE:g}], [-0.5]]")


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).sum(axis=1, keepdims=True) + 1e-6)


def _reference(X, W_Q, W_K, W_V, g, beta):
    """A plain per-token recurrence, and the unrolled weights A[t, s] = Σᵢ q_t[i]·(Π_{s<r≤t} e^g[r,i])·k_s[i]
    with the products taken one token at a time: (q, k, o, A, per-channel decay products)."""
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    n, d_k = Q.shape
    q, k = _unit(Q) / math.sqrt(d_k), _unit(K)
    g = np.broadcast_to(np.asarray(g, dtype=float).reshape(n, -1), (n, d_k))
    S = np.zeros((d_k, V.shape[1]))
    o = np.zeros((n, V.shape[1]))
    deltas = np.zeros_like(o)
    for t in range(n):
        S = np.exp(g[t])[:, None] * S
        deltas[t] = (V[t] - S.T @ k[t]) * beta[t]
        S = S + np.outer(k[t], deltas[t])
        o[t] = S.T @ q[t]
    prod = np.zeros((n, n, d_k))
    A = np.zeros((n, n))
    for t in range(n):
        for s in range(t + 1):
            fade = np.ones(d_k)
            for r in range(s + 1, t + 1):
                fade = fade * np.exp(g[r])
            prod[t, s] = fade
            A[t, s] = float((q[t] * fade * k[s]).sum())
    assert np.allclose(A @ deltas, o, rtol=1e-9, atol=1e-9 * np.abs(o).max())  # the unrolling holds in the reference
    return q, k, o, A, prod


def _kda_reference(sc):
    cfg = sc.deltanet
    ch = cfg.channels
    X, head = np.asarray(sc.X, dtype=float), sc.heads[0]
    a = (X @ ch.W_fa) @ ch.W_fb + np.asarray(ch.dt_bias, dtype=float).reshape(-1)
    softplus = np.where(a > 20.0, a, np.log1p(np.exp(np.minimum(a, 20.0))))
    g = -math.exp(float(np.asarray(ch.A_log).reshape(-1)[0])) * softplus  # (n, d_k)
    beta = np.asarray(cfg.beta, dtype=float).reshape(-1)
    return g, _reference(X, head.W_Q, head.W_K, head.W_V, g, beta)


def test_kda_channel_masks_multiply_each_decay_under_a_huge_one() -> None:
    sc = parse_scenario(_kda_big(), "kda_big.toml")
    comp = compute(sc)
    g, (_, _, o, A, prod) = _kda_reference(sc)
    assert g[1, 1] == -HUGE and math.isclose(math.exp(g[2, 1]), 0.0474, abs_tol=5e-4)
    dn = comp.heads[0].need(DeltaForward)
    assert np.allclose(dn.output, o, rtol=1e-9, atol=1e-12)
    mask = channel_mask(dn.g)
    assert np.allclose(mask, prod, rtol=1e-12, atol=0)
    assert mask[2, 1, 1] == pytest.approx(math.exp(g[2, 1]), rel=1e-12)  # AI's fade of love's write, not 1
    assert np.allclose(channel_weights(dn.q, dn.k, dn.g), A, rtol=1e-12, atol=1e-15)
    trace = Trace(comp)
    assert np.allclose(trace.matrix("dn_D", 0), A, rtol=1e-12, atol=1e-15)
    assert trace.matrix("dn_D", 0)[2, 1] == pytest.approx(0.5 * math.exp(g[2, 1]), rel=1e-6)  # 0.024, not 0.5
    # the heads view's numbers are these weights (δ left out, as its header now says)
    assert np.allclose(comp.heads[0].weights, np.where(comp.allow, A, 0.0), rtol=1e-12, atol=1e-15)
    page = to_markdown(comp)
    assert "AI [0.000, 0.047, 1.000]" in page
    mapped = page.split("| Σᵢ q_t[i]·e^(G_t[i] − G_s[i])·k_s[i] |", 1)[1]
    ai = next(line for line in mapped.splitlines() if line.startswith("| **AI**"))
    assert [c.strip() for c in ai.split("|")[2:5]] == ["0.321", "0.024", "0.707"]
    assert "✓ o_t = Σ_s (Σ_i q_t[i]" in page and "≈ o_t" not in page
    assert_holds(check_text(page))
    assert_holds(check_text(explanation_text(View(trace), 3)))


def test_gated_deltanet_mask_multiplies_each_decay_under_a_huge_one() -> None:
    sc = parse_scenario(_deltanet_big(), "deltanet_big.toml")
    comp = compute(sc)
    cfg, head = sc.deltanet, sc.heads[0]
    g = np.asarray(cfg.g, dtype=float).reshape(-1)
    beta = np.asarray(cfg.beta, dtype=float).reshape(-1)
    _, _, o, A, prod = _reference(np.asarray(sc.X, dtype=float), head.W_Q, head.W_K, head.W_V, g, beta)
    dn = comp.heads[0].need(DeltaForward)
    assert np.allclose(dn.output, o, rtol=1e-9, atol=1e-12)
    D = decay_mask(dn.g)
    assert np.allclose(D, prod[:, :, 0], rtol=1e-12, atol=0)
    assert D[2, 1] == pytest.approx(math.exp(-0.5), rel=1e-12)  # e^g[AI], not e^0
    assert np.allclose(comp.heads[0].weights, np.where(comp.allow, A, 0.0), rtol=1e-12, atol=1e-15)
    page = to_markdown(comp)
    assert "AI: [0.000, 0.607, 1.000]" in page and "✓ o_t = Σ_s (q_t·k_s)" in page
    assert_holds(check_text(page))


def test_ssd_mask_multiplies_each_decay_under_a_huge_one() -> None:
    rng = np.random.default_rng(7)
    n, d, N = 4, 2, 3
    x, B, C = rng.normal(size=(n, d)), rng.normal(size=(n, N)), rng.normal(size=(n, N))
    dt = np.array([0.5, HUGE, 0.3, 0.2])
    A = -1.0
    head = ssd_head(x, dt, A, B, C, 0.0)
    a = np.exp(dt * A)
    L = np.zeros((n, n))
    y = np.zeros((n, d))
    h = np.zeros((d, N))
    for t in range(n):
        for s in range(t + 1):
            L[t, s] = float(np.prod(a[s + 1:t + 1]))
        h = a[t] * h + np.outer(dt[t] * x[t], B[t])
        y[t] = h @ C[t]
    assert L[2, 1] == pytest.approx(math.exp(-0.3)) and L[3, 1] == pytest.approx(math.exp(-0.5))
    assert np.allclose(head.L, L, rtol=1e-12, atol=0)
    assert np.allclose(head.y_attention, y, rtol=1e-9, atol=1e-9 * np.abs(y).max())


def test_the_unrolled_map_fills_when_it_is_worked_by_key_token() -> None:
    for name in ("kda", "deltanet"):
        comp = compute(load_scenario(name))
        trace = Trace(comp)
        n = comp.scenario.n
        owner = trace.owner("dn_D")
        step = trace.segment_for("dn_step", 0)
        assert step is not None
        last = step.stop - 1
        for index in (0, step.start, last - 1):
            assert owner.filled(trace, "dn_D", 0, index) == 0, (name, index)
        assert owner.filled(trace, "dn_D", 0, last) == n * n
        assert [trace.col_label("dn_D", j) for j in range(n)] == list(comp.scenario.key_labels)
        # the app's pane at the first operation shows no number of the map, at the last every one
        view = View(trace)
        first = [p for p in view.panes(Position(0, 0), overview=True)[1] if p.key == "dn_D@0"]
        assert first and first[0].filled == 0 and first[0].col_labels == tuple(comp.scenario.key_labels)
        done = [p for p in view.panes(Position(last, 0), overview=True)[1] if p.key == "dn_D@0"]
        assert done and done[0].filled == n * n


@pytest.mark.parametrize("name", ["kda", "deltanet", "deltanet_learns"])
def test_the_heads_view_header_says_the_map_is_the_weights_on_delta(name: str) -> None:
    comp = compute(load_scenario(name))
    said = ask.map_formula(comp.heads)
    assert said is not None
    mapped, rest = said[0][0], "".join(text for text, _ in said[1:])
    assert "δ" not in mapped and not rest.startswith("·"), said  # not "…·δ": the numbers are not times δ
    assert rest == " weighs δ"
    frame = Presenter(comp).frame(Position(0, 0), Modes(view="heads"))
    assert "".join(part for part, _ in frame.explanation.formula) == mapped + rest


@pytest.mark.parametrize("name", ["kda", "deltanet", "deltanet_learns"])
def test_the_page_names_the_tables_as_the_lines_do(name: str) -> None:
    page = to_markdown(compute(load_scenario(name)))
    corners = [line.split("|")[1].strip() for line in page.splitlines() if line.startswith("| ") and "**" not in line
               and not line.startswith("| :")]
    internal = [c for c in corners if re.match(r"(dn_|dnb_|gb_)", c)]
    assert not internal, internal
    for corner in ("q", "k", "S'", "kv", "δ", "S", "o"):
        assert corner in corners, (corner, corners)
    if name != "deltanet":  # g and β computed: their table's columns say which is which
        header = next(line for line in page.splitlines() if line.startswith("| g, β "))
        assert header.rstrip(" |").endswith("β")


def test_the_kda_description_says_what_love_reads() -> None:
    sc = load_scenario("kda")
    g, (q, k, o, _, _) = _kda_reference(sc)
    text = " ".join(sc.description.split())
    said = re.search(r"as o = \[([\d.]+), ([\d.]+)\]", text)
    assert said is not None, text
    assert (float(said.group(1)), float(said.group(2))) == (round(o[1, 0], 3), round(o[1, 1], 3))
    # the three factors it names multiply to it: I's unit key, channel 0's fade at love, love's query
    factors = re.search(r"0\.707 \(I's unit key[^)]*\) · ([\d.]+) \([^)]*\) · 0\.707 \(love's unit query", text)
    assert factors is not None, text
    assert round(k[0, 0], 3) == 0.707 and round(q[1, 0], 3) == 0.707
    assert float(factors.group(1)) == round(math.exp(g[1, 0]), 3)
    assert round(k[0, 0] * math.exp(g[1, 0]) * q[1, 0], 3) == round(o[1, 0], 3)
    assert "faded by 5%." not in text


def test_a_state_wiped_by_huge_decays_is_shown_not_refused() -> None:
    # g of −1e308 then −1.7e308: running sums reached −∞ and −∞ − (−∞) = NaN in the mask, and the file was
    # refused as "masked overflow … expected a smaller ALiBi slope" (there is no ALiBi). Multiplied directly the
    # mask is e^g's: 0 across a wipe, e^−0.5 after it; the state forgets I and love, and every path shows that.
    text = (SCENARIOS / "deltanet.toml").read_text().replace("g = [[-0.5], [-0.5], [-0.5]]",
                                                             "g = [[-1e308], [-1.7e308], [-0.5]]")
    assert assert_every_path(text)
    comp = compute(parse_scenario(text, "wiped.toml"))
    sc, head = comp.scenario, comp.scenario.heads[0]
    g = np.asarray(sc.deltanet.g, dtype=float).reshape(-1)
    _, _, o, A, prod = _reference(np.asarray(sc.X, dtype=float), head.W_Q, head.W_K, head.W_V, g,
                                  np.asarray(sc.deltanet.beta, dtype=float).reshape(-1))
    dn = comp.heads[0].need(DeltaForward)
    assert np.array_equal(decay_mask(dn.g), prod[:, :, 0])
    assert np.allclose(dn.output, o, rtol=1e-12, atol=1e-15)
    assert np.allclose(comp.heads[0].weights, np.where(comp.allow, A, 0.0), rtol=1e-12, atol=1e-15)
