"""Prefill, chunked prefill and decode with a KV cache, against loop implementations of attention."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.kernels.rope import Rotated
from qkv_tui.teach.decode import SCHEDULES, decode, decode_mask, schedule

from .conftest import BASE, HEAD, SOFTMAX_SCENARIOS
from .strategies import Case, cases


def attention_by_loops(X, X_kv, W_Q, W_K, W_V, scale, allowed):
    """Attention written out with loops: query t sees the keys ``allowed(t, j)`` says it may."""
    Q, K, V = X @ W_Q, X_kv @ W_K, X_kv @ W_V
    divisor = math.sqrt(W_Q.shape[1]) if scale is None else scale
    out = []
    for t in range(len(X)):
        keys = [j for j in range(len(X_kv)) if allowed(t, j)]
        s = [float(Q[t] @ K[j]) / divisor for j in keys]
        top = max(s)
        e = [math.exp(v - top) for v in s]
        out.append(sum(e[i] / sum(e) * V[j] for i, j in enumerate(keys)))
    return np.array(out)


@settings(max_examples=80, deadline=None)
@given(cases(), st.sampled_from(SCHEDULES))
def test_decode_equals_full_attention_under_the_decode_mask(case: Case, mode: str) -> None:
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    dec = decode(comp, mode)
    sc = comp.scenario
    mask = np.array(case.allow)
    if not sc.is_cross:  # the past part of the scenario's mask, or plain causal if that leaves a row empty
        past = mask & np.tril(np.ones_like(mask))
        mask = past if past.any(axis=1).all() else np.tril(np.ones_like(mask))
    assert np.array_equal(dec.allow, mask)
    for h, steps in enumerate(dec.steps):
        head = sc.heads[h]
        want = attention_by_loops(sc.X, sc.X_kv, head.W_Q, head.W_K, head.W_V, sc.scale, lambda t, j: mask[t, j])
        got = np.concatenate([s.output for s in steps])
        assert got.shape == want.shape and np.allclose(got, want, rtol=1e-9, atol=1e-9)
        assert all(s.matches for s in steps)
        if not sc.is_cross:
            assert [s.K_cache.shape[0] for s in steps] == [r.stop for r in dec.ranges]  # the cache holds the past only


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 9), st.data())
def test_chunked_prefill_equals_full_causal_attention_for_every_chunk_size(n: int, data: st.DataObject) -> None:
    X = data.draw(st.lists(st.lists(st.integers(-3, 3), min_size=3, max_size=3), min_size=n, max_size=n))
    W = [data.draw(st.lists(st.lists(st.integers(-2, 2), min_size=2, max_size=2), min_size=3, max_size=3))
         for _ in range(3)]
    tokens = ", ".join(f'"t{i}"' for i in range(n))
    for prefill in range(1, n + 1):
        for chunk in range(1, prefill + 1):
            text = (f"tokens = [{tokens}]\nX = {X}\nmask = \"causal\"\n[cache]\nprefill = {prefill}\nchunk = {chunk}\n"
                    f"[[heads]]\nW_Q = {W[0]}\nW_K = {W[1]}\nW_V = {W[2]}\n")
            comp = compute(parse_scenario(text, "chunks.toml"))
            dec = decode(comp, "chunked")
            sizes = [len(r) for r in dec.ranges]
            assert sizes[: -(-prefill // chunk)] == [min(chunk, prefill - s) for s in range(0, prefill, chunk)]
            got = np.concatenate([s.output for s in dec.steps[0]])
            sc = comp.scenario
            head = sc.heads[0]
            want = attention_by_loops(sc.X, sc.X, head.W_Q, head.W_K, head.W_V, None, lambda t, j: j <= t)
            assert np.allclose(got, want, rtol=1e-9, atol=1e-9)
            assert np.allclose(got, comp.heads[0].output, rtol=1e-9, atol=1e-9)  # causal: the trace itself


def test_a_chunk_sits_bottom_right() -> None:
    text = BASE + 'mask = "causal"\n[cache]\nprefill = 3\nchunk = 2\n' + HEAD
    dec = decode(compute(parse_scenario(text, "c.toml")), "chunked")
    second = dec.steps[0][1]
    assert (second.start, second.stop) == (2, 3)
    assert second.allowed.tolist() == [[True, True, True]]  # the one query is the last key: it sees all three
    first = dec.steps[0][0]
    assert first.allowed.tolist() == [[True, False], [True, True]]


def test_schedules() -> None:
    assert schedule(5, "prefill", 3, 2) == [range(0, 3), range(3, 4), range(4, 5)]
    assert schedule(5, "chunked", 3, 2) == [range(0, 2), range(2, 3), range(3, 4), range(4, 5)]
    assert schedule(3, "tokens", 2, 1) == [range(0, 1), range(1, 2), range(2, 3)]
    assert load_scenario("i_love_ai").production.prefill_for(3) == 2


def test_cache_accounting() -> None:
    dec = decode(compute(load_scenario("causal_mask")), "tokens")
    assert [(s.kv_computed, s.kv_reused) for s in dec.steps[0]] == [(1, 0), (1, 1), (1, 2)]
    assert (dec.rows_computed(0, 2), dec.rows_reused(0, 2), dec.rows_without_cache(2)) == (3, 3, 6)
    # the earlier rows are the very rows computed before: reused, not recomputed
    assert np.array_equal(dec.steps[0][2].K_cache[:2], dec.steps[0][1].K_cache)
    pre = decode(compute(load_scenario("causal_mask")), "prefill")
    assert [(s.kv_computed, s.kv_reused) for s in pre.steps[0]] == [(2, 0), (1, 2)]
    assert pre.rows_without_cache(1) == 5
    cross = decode(compute(load_scenario("cross_attention")), "tokens")
    assert [(s.kv_computed, s.kv_reused) for s in cross.steps[0]] == [(3, 0), (0, 3), (0, 3)]
    assert cross.rows_without_cache(2) == 9


def test_the_decode_mask_honours_what_a_cache_can() -> None:
    padded = decode(compute(load_scenario("padding_mask")), "tokens")
    assert all(s.matches for s in padded.steps[0])
    pad_step = padded.steps[0][3]  # the <pad> query: its own key is padding, never attended
    assert pad_step.weights.shape == (1, 4) and pad_step.weights[0, 3] == 0.0
    assert decode_mask(load_scenario("causal_mask"))[1]
    plain = decode(compute(load_scenario("i_love_ai")), "tokens")
    assert not plain.own_mask and plain.differs_from_trace() == (0, 1)
    # out[I] with a cache sees only I; the Mix stage saw every token
    assert np.allclose(plain.steps[0][0].output, [[1.0, 0.0, 1.0]])
    assert np.allclose(plain.steps[0][0].trace_output, [[1.0, 1.637, 0.070]], atol=5e-4)
    custom = decode_mask(load_scenario("custom_mask"))[0]
    assert custom.tolist() == [[True, False, False], [True, True, False], [False, True, True]]


def test_decode_and_tiles_honour_every_modern_variant() -> None:
    """rope, ALiBi, sinks, norms, biases and shared K/V heads: under a mask a cache can keep, decode is the Mix stage."""
    from dataclasses import replace

    from qkv_tui.core.part_questions import refusal
    from qkv_tui.core.scenario import builtin_names
    from qkv_tui.teach.tiled import tiled

    for name in builtin_names():
        sc = load_scenario(name)
        if sc.linear is not None or sc.deltanet is not None:  # a state, not a cache: tests/test_linear_attention.py
            continue
        if not sc.is_cross:
            causal = np.tril(np.ones((sc.n, sc.n), dtype=bool)) & (sc.allow if sc.mask_kind == "sliding" else True)
            sc = replace(sc, mask_kind=sc.mask_kind if sc.mask_kind == "sliding" else "causal", allow=causal)
        comp = compute(sc)
        if refusal(comp.heads, "cache") is not None:  # a part the cache view says it cannot replay (differential)
            continue
        for mode in SCHEDULES:
            dec = decode(comp, mode)
            assert dec.own_mask, name
            for h, steps in enumerate(dec.steps):
                got = np.concatenate([s.output for s in steps])
                assert np.allclose(got, comp.heads[h].output, rtol=1e-9, atol=1e-12), (name, mode, h)
                assert all(s.paged_error == 0 for s in steps)
        for h in range(len(comp.heads)):
            for tile in (1, 2, 3):
                assert tiled(comp, h, tile).matches, (name, h, tile)


# --- the conventions the cache view states, each with whose it is ------------------------------------


def _line(dec, i: int, start: str) -> str:
    from qkv_tui.display.decode_view import decode_lines

    return next(line for line in decode_lines(dec, i, 0, 3) if line.startswith(start))


def test_each_step_is_torchs_attention_with_causal_lower_right() -> None:
    torch = pytest.importorskip("torch")
    from torch.nn.attention.bias import causal_lower_right
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    comp = compute(load_scenario("sixteen_tokens"))
    hr = comp.heads[0]
    for mode in SCHEDULES:
        dec = decode(comp, mode)
        for i in range(dec.count):
            step = dec.steps[0][i]
            L, S = step.allowed.shape
            q, k, v = (torch.from_numpy(np.array(a))[None, None] for a in (step.q, step.K_cache, step.V_cache))
            theirs = sdpa(q, k, v, attn_mask=causal_lower_right(L, S), scale=1 / hr.scale)[0, 0].numpy()
            assert np.allclose(step.output, theirs, rtol=1e-12, atol=1e-12), (mode, i)
            if L < S:  # what the view warns of: aligned top-left, the first query sees key 0 alone
                top_left = sdpa(q, k, v, is_causal=True, scale=1 / hr.scale)[0, 0].numpy()
                assert np.allclose(top_left[0], step.V_cache[0]) and not np.allclose(top_left, theirs)
    line = _line(decode(comp, "prefill"), 1, "mask aligned bottom-right")
    assert "as FlashAttention ≥ 2.1 and vLLM align it (PyTorch: causal_lower_right)" in line
    assert "as PyTorch's is_causal=True (causal_upper_left) does with fewer queries than keys" in line


def test_an_unmasked_scenario_is_checked_against_causal_attention_not_the_mix_stage() -> None:
    comp = compute(load_scenario("i_love_ai"))  # no mask: the Mix stage lets I see love and AI
    dec = decode(comp, "prefill")
    hr = comp.heads[0]
    causal = attention_by_loops(comp.scenario.X, comp.scenario.X, hr.W_Q, hr.W_K, hr.W_V, None, lambda t, j: j <= t)
    assert np.allclose(dec.reference[0], causal, atol=1e-12) and not np.allclose(causal, hr.output, atol=1e-3)
    check = _line(dec, 0, "✓ equal to")
    assert check.startswith("✓ equal to causal attention over all tokens at once (no cache; not the Mix stage,"
                            " which has no mask) within float64 rounding (every |diff| ≤ 1e-")
    assert _line(dec, 0, "the Mix stage (no mask) had out[love] = [1.000, 1.000, 0.333]")
    own = decode(compute(load_scenario("causal_mask")), "prefill")
    assert _line(own, 1, "✓ equal to").startswith("✓ equal to attention over all tokens at once (no cache) within")


def test_q_names_the_norm_and_the_rotation() -> None:
    from qkv_tui.display.decode_view import DECODE_MEANING, decode_panes

    text = ('tokens = ["a", "b", "c"]\nX = [[1, 2], [0, 1], [2, 1]]\n[norm]\nkind = "rms"\n'
            '[rope]\nlayout = "interleaved"\n[[heads]]\nW_Q = [[1, 0], [0, 1]]\nW_K = [[1, 1], [0, 1]]\n'
            "W_V = [[1, 0], [0, 1]]\n")
    comp = compute(parse_scenario(text, "nr.toml"))
    dec = decode(comp, "prefill")
    line = _line(dec, 1, "q[c]")
    assert line.startswith("q[c] = rotate(X̂[c]·W_Q, position 2) = ")
    assert _line(dec, 0, "Q[a..b]").startswith("Q[a..b] = RoPE(X̂·W_Q): 2 rows at once")
    focus, _ = decode_panes(dec, 1, 0, 3)
    q = next(p for p in focus if p.key == "dq")
    assert q.title.startswith("q = RoPE(X̂·W_Q) (fresh)")
    assert np.array_equal(q.values, comp.heads[0].need(Rotated).Q_rot[2:3])  # rotated, from the normalised X
    assert not np.allclose(q.values, comp.scenario.X[2:3] @ comp.heads[0].W_Q)
    assert "in a model, the token it has just produced; here the sentence's next word stands in for it" in DECODE_MEANING


@pytest.mark.parametrize("decimals", [1, 3, 6])
@pytest.mark.parametrize("path", SOFTMAX_SCENARIOS, ids=lambda p: p.stem)
def test_the_cache_views_weights_read_as_the_trace_prints_them(path, decimals: int) -> None:
    # the cache view prints results only (no intermediates): each weight is the trace's, digit for digit
    from qkv_tui.display.decode_view import decode_lines
    from qkv_tui.teach.trace import Trace

    comp = compute(load_scenario(path))
    trace = Trace(comp)
    dec = decode(comp, "tokens")
    differ = set(dec.differs_from_trace())
    compared = 0
    for h in range(len(comp.heads)):
        for i in range(dec.count):
            step = dec.steps[h][i]
            if step.t in differ:
                continue  # another mask, other weights: the line beside it says so
            line = next(x for x in decode_lines(dec, i, h, decimals) if x.startswith("weights["))
            shown = line.split(" = ")[-1].split("   (over")[0].strip("[]").split(", ")
            live = [step.first + j for j in np.flatnonzero(step.allowed[-1])]
            want = trace.softmax_row(h, step.t, decimals).weights
            assert shown == [want[j] for j in live], line
            compared += 1
    assert compared > 0 or len(differ) == comp.scenario.n
