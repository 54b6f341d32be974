"""Hypothesis strategies for the parts of 2026: `[differential]`, `[indexer]`, `[ssd]`, per-channel `[deltanet]`
gates (Kimi Delta Attention), `[value_scale]` and `[v_norm]`.

Each draws a valid scenario as TOML text over the options docs/scenario-format.md lists for the table, with
and without what the loader lets it combine with (a pre-norm, [rope], ALiBi, a soft-cap, W_O). `extreme=True`
draws the numbers from the edges of float64, where the loader or the engine must refuse with one line or
compute and show finite numbers.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from .strategies_latent_state import EXTREME, _assign, _output, _rope, _start, _values


def _heads(matrix: Any, d_model: int, heads: int, d_q: int, d_v: int) -> list[str]:
    lines: list[str] = []
    for h in range(heads):
        lines += ["[[heads]]", f'name = "h{h}"', _assign("W_Q", matrix(d_model, d_q)), _assign("W_K", matrix(d_model, d_q)),
                  _assign("W_V", matrix(d_model, d_v))]
    return lines


def _positive(draw: st.DrawFn, extreme: bool) -> Any:
    pick = st.sampled_from([1e-300, 5e-324, 1e300, 1.7e308, 1, 0.5]) if extreme else st.sampled_from([0.5, 1, 2, 0.707, 3])
    return draw(pick)


@st.composite
def differential_scenarios(draw: st.DrawFn, extreme: bool = False) -> str:
    """[differential]: heads 2d wide, λ vectors, λ_init or the layer, the sub-norm's eps and gains; with [rope],
    a soft-cap or ALiBi beside it."""
    matrix, vec = _values(draw, extreme)
    n, d_model, heads, d = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    causal = draw(st.booleans())
    lines = _start(draw, matrix, vec, n, d_model, causal)
    if draw(st.booleans()):
        lines.insert(2, f"softcap = {_positive(draw, extreme)!r}")
    lines += _heads(matrix, d_model, heads, 2 * d, 2 * d)
    extra = draw(st.sampled_from(["none", "rope", "alibi"]))
    if extra == "rope":
        lines += _rope(draw, n)
    elif extra == "alibi":
        lines += ["[alibi]"]
    lambdas = st.sampled_from([0, 0.1, -0.1, 0.5, -0.5, 1]) if not extreme else EXTREME
    lines.append("[differential]")
    for key in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
        lines.append(_assign(key, draw(st.lists(st.lists(lambdas, min_size=d, max_size=d), min_size=heads, max_size=heads))))
    if draw(st.booleans()):
        lines.append(f"lambda_init = {draw(st.sampled_from([0.2, 0.8, 0, 0.5, -0.3]))!r}")
    else:
        lines.append(f"layer = {draw(st.integers(0, 40))}")
    if draw(st.booleans()):
        lines.append(f"eps = {_positive(draw, extreme)!r}")
    if draw(st.booleans()):
        lines.append(_assign("gamma", vec(2 * d)))
    lines += _output(draw, matrix, vec, heads * 2 * d)
    return "\n".join(lines) + "\n"


@st.composite
def indexer_scenarios(draw: st.DrawFn, extreme: bool = False) -> str:
    """[indexer]: H_I index heads of d_I, one index key, every top_k from 1 past the keys, turned dimensions
    under [rope] in both layouts, the key's LayerNorm off, on, or given."""
    matrix, vec = _values(draw, extreme)
    n, d_model, heads, d_k = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    causal = draw(st.booleans())
    lines = _start(draw, matrix, vec, n, d_model, causal)
    lines += _heads(matrix, d_model, heads, d_k, d_k)
    h_i, d_i = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    rope_dims = 0
    if draw(st.booleans()):
        lines += _rope(draw, n)
        rope_dims = draw(st.sampled_from([r for r in range(0, d_i + 1, 2)]))
    lines += ["[indexer]", f"num_heads = {h_i}", f"top_k = {draw(st.integers(1, n + 1))}",
              _assign("W_q", matrix(d_model, h_i * d_i)), _assign("W_k", matrix(d_model, d_i)),
              _assign("W_w", matrix(d_model, h_i))]
    if rope_dims:
        lines += [f"rope_dims = {rope_dims}", f'rope_layout = "{draw(st.sampled_from(["half", "interleaved"]))}"']
    norm = draw(st.sampled_from(["none", "true", "table"]))
    if norm == "true":
        lines.append("k_norm = true")
    elif norm == "table":
        lines.append(f"k_norm = {{ gamma = {vec(d_i)!r}, beta = {vec(d_i)!r}, eps = {_positive(draw, extreme)!r} }}")
    lines += _output(draw, matrix, vec, heads * d_k)
    return "\n".join(lines) + "\n"


@st.composite
def ssd_scenarios(draw: st.DrawFn, extreme: bool = False) -> str:
    """[ssd]: heads in groups, dt given or computed (with its clamp), x given or X, the skip, the z-gate and its
    grouped norm."""
    matrix, vec = _values(draw, extreme)
    n, heads, d = draw(st.integers(1, 4)), draw(st.sampled_from([1, 2, 4])), draw(st.integers(1, 2))
    d_model = draw(st.integers(1, 3))
    lines = _start(draw, matrix, vec, n, d_model, True)
    given_x = draw(st.booleans()) or d_model != heads * d
    lines += _heads(matrix, d_model, heads, d, d)
    groups = draw(st.sampled_from([g for g in (1, 2, 4) if heads % g == 0]))
    d_state = draw(st.integers(1, 2))
    rate = EXTREME.filter(lambda a: a < 0) if extreme else st.sampled_from([-1.0, -0.5, -2.0, -0.1])
    lines += ["[ssd]", f"num_heads = {heads}", f"num_groups = {groups}",
              _assign("A", draw(st.lists(rate, min_size=heads, max_size=heads)))]
    if draw(st.booleans()):
        step = st.sampled_from([1e-300, 1, 1e300]) if extreme else st.sampled_from([0.1, 0.5, 1, 2])
        lines.append(_assign("dt", draw(st.lists(st.lists(step, min_size=heads, max_size=heads), min_size=n, max_size=n))))
    else:
        lines.append(_assign("W_dt", matrix(d_model, heads)))
        if draw(st.booleans()):
            lines.append(_assign("dt_bias", vec(heads)))
        if draw(st.booleans()):
            lines += ["dt_min = 0.001", "dt_max = 10.0"]
    lines += [_assign("B", matrix(n, groups * d_state)), _assign("C", matrix(n, groups * d_state))]
    if given_x:
        lines.append(_assign("x", matrix(n, heads * d)))
    if draw(st.booleans()):
        lines.append(_assign("D", vec(heads)))
    if draw(st.booleans()):
        lines.append(_assign("z", matrix(n, heads * d)))
        if draw(st.booleans()):
            lines.append(_assign("gamma", vec(heads * d)))
        if draw(st.booleans()):
            lines.append(f"eps = {_positive(draw, extreme)!r}")
    return "\n".join(lines) + "\n"


@st.composite
def kda_scenarios(draw: st.DrawFn, extreme: bool = False) -> str:
    """[deltanet] with a forget gate per key channel (Kimi Delta Attention): g given n × heads × d_k, or from the
    low-rank W_fa, W_fb with A_log and per-channel dt_bias."""
    matrix, vec = _values(draw, extreme)
    n, d_model, heads, d_k = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 3))
    lines = _start(draw, matrix, vec, n, d_model, True)
    lines += _heads(matrix, d_model, heads, d_k, d_k)
    lines.append("[deltanet]")
    decay = st.sampled_from([0, -0.5, -1, -0.1, -3, -1e-300, -1e300]) if extreme else st.sampled_from([0, -0.5, -1, -0.25, -2])
    if draw(st.booleans()):
        per_token = st.lists(st.lists(decay, min_size=d_k, max_size=d_k), min_size=heads, max_size=heads)
        lines.append(_assign("g", draw(st.lists(per_token, min_size=n, max_size=n))))
    else:
        rank = draw(st.integers(1, 2))
        lines += [_assign("W_fa", matrix(d_model, rank)), _assign("W_fb", matrix(rank, heads * d_k)),
                  _assign("A_log", vec(heads)), _assign("dt_bias", [vec(d_k) for _ in range(heads)])]
    if draw(st.booleans()):
        lines.append(_assign("beta", matrix(n, heads)))
    else:
        lines.append(_assign("W_b", matrix(d_model, heads)))
    lines += _output(draw, matrix, vec, heads * d_k)
    return "\n".join(lines) + "\n"


@st.composite
def value_scenarios(draw: st.DrawFn, extreme: bool = False) -> str:
    """A softmax scenario whose values are scaled ([value_scale], with V heads narrower than Q/K heads) or
    RMS-normed ([v_norm]), with [rope], ALiBi or a sink beside it."""
    matrix, vec = _values(draw, extreme)
    n, d_model, heads, d_q = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 3))
    table = draw(st.sampled_from(["value_scale", "v_norm"]))
    d_v = draw(st.integers(1, d_q)) if table == "value_scale" else d_q
    lines = _start(draw, matrix, vec, n, d_model, draw(st.booleans()))
    lines += _heads(matrix, d_model, heads, d_q, d_v)
    extra = draw(st.sampled_from(["none", "rope", "alibi"]))
    if extra == "rope" and d_q % 2 == 0:
        lines += _rope(draw, n)
    elif extra == "alibi":
        lines += ["[alibi]"]
    if table == "value_scale":
        lines += ["[value_scale]", f"factor = {_positive(draw, extreme)!r}"]
    else:
        lines += ["[v_norm]"] + ([f"eps = {_positive(draw, extreme)!r}"] if draw(st.booleans()) else [])
    lines += _output(draw, matrix, vec, heads * d_v)
    return "\n".join(lines) + "\n"


PARTS = {"differential": differential_scenarios, "indexer": indexer_scenarios, "ssd": ssd_scenarios,
         "kda": kda_scenarios, "values": value_scenarios}
