"""Hypothesis strategies for the tables that define or replace the heads: `[mla]`, `[linear]`, `[deltanet]`.

Each draws a valid scenario as TOML text, over every option docs/scenario-format.md lists for
its table (both query forms of [mla] and its latent norms, every feature map of [linear] with
and without normalising, [deltanet]'s g and β given or computed from the weights), with and
without a pre-norm, [rope], [qk_norm], an output gate and W_O where the table allows them.
`extreme=True` draws the numbers from the edges of float64 instead, where the loader or the
engine must refuse with one line or compute and show finite numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from .variants_cases import number, toml_value

# the values at which float64 arithmetic starts to fail: underflow, squares past the range, the range's edge
EXTREME = st.sampled_from([0, 1, -1, 0.5, -2.5, 3, 1e-300, -1e-300, 5e-324, 1e-160, 1e153, -1e153, 1.2e154,
                           -1.4e154, 1e200, -1e300, 1.7e308, -1.7e308])


def _values(draw: st.DrawFn, extreme: bool) -> Any:
    pick = EXTREME if extreme else number

    def matrix(rows: int, cols: int) -> list[list[Any]]:
        return draw(st.lists(st.lists(pick, min_size=cols, max_size=cols), min_size=rows, max_size=rows))

    def vec(size: int) -> list[Any]:
        return draw(st.lists(pick, min_size=size, max_size=size))

    return matrix, vec


def _assign(key: str, value: Any) -> str:
    return f"{key} = {toml_value(value)}"


def _start(draw: st.DrawFn, matrix: Any, vec: Any, n: int, d_model: int, causal: bool) -> list[str]:
    tokens = [f"t{i}" for i in range(n)]
    lines = [_assign("tokens", tokens), _assign("X", matrix(n, d_model))]
    if causal:
        lines.append('mask = "causal"')
    if draw(st.booleans()):
        kind = draw(st.sampled_from(["rms", "layer"]))
        lines += ["[norm]", f'kind = "{kind}"']
        if draw(st.booleans()):
            lines.append(_assign("gamma", vec(d_model)))
        if kind == "layer" and draw(st.booleans()):
            lines.append(_assign("beta", vec(d_model)))
    return lines


def _rope(draw: st.DrawFn, n: int) -> list[str]:
    layout = draw(st.sampled_from(["interleaved", "half"]))
    lines = ["[rope]", f'layout = "{layout}"', f"base = {draw(st.sampled_from([10000.0, 10.0, 2.0]))!r}"]
    if draw(st.booleans()):
        lines.append(_assign("positions", draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))))
    return lines


def _output(draw: st.DrawFn, matrix: Any, vec: Any, width: int) -> list[str]:
    if not draw(st.booleans()):
        return []
    d_out = draw(st.integers(1, 3))
    lines = ["[output]", _assign("W_O", matrix(width, d_out))]
    if draw(st.booleans()):
        lines.append(_assign("b_O", vec(d_out)))
    return lines


@st.composite
def mla_scenarios(draw: st.DrawFn, extreme: bool = False) -> str:
    """[mla] with W_Q or W_DQ/W_UQ, kv_norm and q_norm with or without their gains, [rope], a pre-norm, W_O."""
    matrix, vec = _values(draw, extreme)
    n, d_model = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    heads, d_nope, d_rope, d_v = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.sampled_from([2, 4])), \
        draw(st.integers(1, 2))
    d_c = draw(st.integers(1, 3))
    mask = draw(st.sampled_from(["none", "causal", "padding"]))
    lines = _start(draw, matrix, vec, n, d_model, mask == "causal")
    if mask == "padding":
        pad = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        pad[draw(st.integers(0, n - 1))] = False  # every query keeps a key
        lines.insert(2, f"mask = {{ kind = \"padding\", pad = {toml_value(pad)} }}")
    if draw(st.booleans()):
        lines.insert(2, f"scale = {draw(st.sampled_from([1.0, 0.5, 2.0]))!r}")
    mla = ["[mla]", f"num_heads = {heads}", f"d_nope = {d_nope}", f"d_rope = {d_rope}", f"d_v = {d_v}",
           _assign("W_DKV", matrix(d_model, d_c)), _assign("W_UK", matrix(d_c, heads * d_nope)),
           _assign("W_UV", matrix(d_c, heads * d_v)), _assign("W_KR", matrix(d_model, d_rope))]
    q_latent = draw(st.booleans())
    if q_latent:
        d_cq = draw(st.integers(1, 3))
        mla += [_assign("W_DQ", matrix(d_model, d_cq)), _assign("W_UQ", matrix(d_cq, heads * (d_nope + d_rope)))]
        if draw(st.booleans()):
            mla.append("q_norm = true")
            if draw(st.booleans()):
                mla.append(_assign("gamma_q", vec(d_cq)))
    else:
        mla.append(_assign("W_Q", matrix(d_model, heads * (d_nope + d_rope))))
    if draw(st.booleans()):
        mla.append(f"kv_norm = {toml_value(draw(st.booleans()))}")
        if mla[-1] == "kv_norm = true" and draw(st.booleans()):
            mla.append(_assign("gamma_kv", vec(d_c)))
    if draw(st.booleans()):
        mla.append(f"eps = {draw(st.sampled_from([1e-6, 1e-5, 0.5]))!r}")
    lines += mla
    if draw(st.booleans()):
        lines += _rope(draw, n)
    lines += _output(draw, matrix, vec, heads * d_v)
    return "\n".join(lines) + "\n"


def _state_heads(draw: st.DrawFn, matrix: Any, vec: Any, d_model: int, heads: int, d_k: int, d_v: int,
                 wide: bool, gate: bool) -> list[str]:
    """The projections of a table that replaces the softmax: [[heads]] tables, or the [attention] form (wide)."""
    lines: list[str] = []
    if not wide:
        for h in range(heads):
            lines += ["[[heads]]", f'name = "h{h}"', _assign("W_Q", matrix(d_model, d_k)),
                      _assign("W_K", matrix(d_model, d_k)), _assign("W_V", matrix(d_model, d_v))]
            for role, width in (("b_Q", d_k), ("b_K", d_k), ("b_V", d_v)):
                if draw(st.booleans()):
                    lines.append(_assign(role, vec(width)))
            if gate:
                lines.append(_assign("W_G", matrix(d_model, d_v)))
        return lines
    lines += ["[attention]", f"num_heads = {heads}", _assign("W_Q", matrix(d_model, heads * d_k)),
              _assign("W_K", matrix(d_model, heads * d_k)), _assign("W_V", matrix(d_model, heads * d_v))]
    if draw(st.booleans()):
        lines.append(_assign("b_V", vec(heads * d_v)))
    if gate:
        lines += ["[gate]", _assign("W_G", matrix(d_model, heads * d_v))]
    return lines


def _around_the_heads(draw: st.DrawFn, vec: Any, n: int, d_k: int, heads: int, wide: bool) -> list[str]:
    lines: list[str] = []
    if d_k % 2 == 0 and draw(st.booleans()):
        lines += _rope(draw, n)
    if draw(st.booleans()):
        over = draw(st.sampled_from(["head", "all"])) if wide else "head"
        lines += ["[qk_norm]", f'over = "{over}"']
        width = d_k * (heads if over == "all" else 1)
        for key in ("gamma_q", "gamma_k"):
            if draw(st.booleans()):
                lines.append(_assign(key, vec(width)))
    return lines


def _state_scenario(draw: st.DrawFn, extreme: bool, table: Callable[[Any, Any, int, int, int], list[str]]) -> str:
    """A scenario whose heads keep a state: the causal self-attention they need, then table(matrix, vec, n,
    d_model, num_heads)'s lines for [linear] or [deltanet], then maybe W_O."""
    matrix, vec = _values(draw, extreme)
    n, d_model, heads = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 2))
    d_k, d_v = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    lines = _start(draw, matrix, vec, n, d_model, causal=True)
    wide = draw(st.booleans())
    lines += _around_the_heads(draw, vec, n, d_k, heads, wide)
    lines += _state_heads(draw, matrix, vec, d_model, heads, d_k, d_v, wide, gate=draw(st.booleans()))
    lines += table(matrix, vec, n, d_model, heads)
    lines += _output(draw, matrix, vec, heads * d_v)
    return "\n".join(lines) + "\n"


@st.composite
def linear_scenarios(draw: st.DrawFn, extreme: bool = False) -> str:
    """[linear] with each feature map, normalised or not, over [[heads]] or [attention], with the other keys it takes."""
    def table(matrix: Any, vec: Any, n: int, d_model: int, heads: int) -> list[str]:
        feature = draw(st.sampled_from(["elu1", "relu", "identity", None]))
        normalize = False if feature == "identity" else draw(st.sampled_from([True, False, None]))
        lines = ["[linear]"]
        if feature is not None:
            lines.append(f'feature = "{feature}"')
        if normalize is not None:
            lines.append(f"normalize = {toml_value(normalize)}")
        return lines

    return _state_scenario(draw, extreme, table)


@st.composite
def deltanet_scenarios(draw: st.DrawFn, extreme: bool = False) -> str:
    """[deltanet] with g and β each given or computed from W_a, A_log, dt_bias and W_b."""
    def table(matrix: Any, vec: Any, n: int, d_model: int, heads: int) -> list[str]:
        lines = ["[deltanet]"]
        decay = st.sampled_from([0, -0.5, -1, -0.1, -3, -1e-300, -1e300]) if extreme else \
            st.sampled_from([0, -0.5, -1, -0.25, -2, -0.05])
        if draw(st.booleans()):
            lines.append(_assign("g", draw(st.lists(st.lists(decay, min_size=heads, max_size=heads), min_size=n, max_size=n))))
        else:
            lines += [_assign("W_a", matrix(d_model, heads)), _assign("A_log", vec(heads)), _assign("dt_bias", vec(heads))]
        if draw(st.booleans()):
            lines.append(_assign("beta", matrix(n, heads)))
        else:
            lines.append(_assign("W_b", matrix(d_model, heads)))
        return lines

    return _state_scenario(draw, extreme, table)


def new_table_scenarios(extreme: bool = False) -> st.SearchStrategy[str]:
    return st.one_of(mla_scenarios(extreme), linear_scenarios(extreme), deltanet_scenarios(extreme))
