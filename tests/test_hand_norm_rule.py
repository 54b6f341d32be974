"""By hand, the norms' lines (Norm, QK-norm and their backward parts) and W_O's backward lines re-compute from
their displayed operands when the inputs have more decimals than are shown: γ = 0.45 at 1 decimal is shown
0.45, as a projection's weight is, never 0.5 beside a result worked with 0.45 (teach/stages/norm.py, cell_lines)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text


def fine(digits: int, low: float = -2.0, high: float = 2.0) -> st.SearchStrategy[float]:
    """A number with up to ``digits`` decimals, more than a 1-decimal screen shows."""
    return st.floats(low, high, allow_nan=False).map(lambda x: round(x, digits))


def rows(count: int, width: int, digits: int) -> st.SearchStrategy[list[list[float]]]:
    return st.lists(st.lists(fine(digits), min_size=width, max_size=width), min_size=count, max_size=count)


def toml(m: list[list[float]]) -> str:
    return "[" + ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in m) + "]"


def stage_lines(trace: Trace, decimals: int, stages: tuple[str, ...]) -> str:
    lines = []
    for seg in trace.segments:
        if seg.stage in stages:
            for i in range(seg.start, seg.stop):
                op = trace.op(i, decimals)
                lines += [op.arithmetic, *op.details]
    return "\n".join(lines)


def by_hand(text: str, decimals: int, stages: tuple[str, ...]) -> None:
    trace = Trace(compute_hand(compute(parse_scenario(text, "generated.toml")), decimals))
    assert_holds(check_text(stage_lines(trace, decimals, stages), whole=False))


HEAD = "[[heads]]\nW_Q = {q}\nW_K = {k}\nW_V = {v}\n"


@st.composite
def normed(draw: st.DrawFn) -> str:
    """A pre-norm scenario whose X, γ and β have 2–3 decimals, with a target (or dO) of as many."""
    n, width, digits = draw(st.integers(1, 3)), draw(st.integers(2, 4)), draw(st.integers(2, 3))
    kind = draw(st.sampled_from(["rms", "layer"]))
    text = [f"tokens = {[f't{i}' for i in range(n)]}".replace("'", '"'), f"X = {toml(draw(rows(n, width, digits)))}",
            "[norm]", f'kind = "{kind}"', f"gamma = {toml(draw(rows(1, width, digits)))[1:-1]}"]
    if kind == "layer" and draw(st.booleans()):
        text.append(f"beta = {toml(draw(rows(1, width, digits)))[1:-1]}")
    text.append(f"eps = {draw(st.sampled_from([1e-5, 0.5]))!r}")
    d_k = draw(st.integers(1, 2))
    text.append(HEAD.format(q=toml(draw(rows(width, d_k, 1))), k=toml(draw(rows(width, d_k, 1))),
                            v=toml(draw(rows(width, 2, 1)))))
    text += ["[backward]", f"{draw(st.sampled_from(['target', 'dO']))} = {toml(draw(rows(n, 2, digits)))}"]
    return "\n".join(text) + "\n"


@st.composite
def qk_normed(draw: st.DrawFn) -> str:
    """QK-norm whose gains and weights have 2–3 decimals, with a target (or dO) of as many."""
    n, width, digits = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(2, 3))
    d_k = draw(st.integers(1, 6))
    text = [f"tokens = {[f't{i}' for i in range(n)]}".replace("'", '"'), f"X = {toml(draw(rows(n, width, 1)))}",
            HEAD.format(q=toml(draw(rows(width, d_k, digits))), k=toml(draw(rows(width, d_k, digits))),
                        v=toml(draw(rows(width, 2, 1)))),
            "[qk_norm]", 'over = "head"', f"gamma_q = {toml(draw(rows(1, d_k, digits)))[1:-1]}",
            f"gamma_k = {toml(draw(rows(1, d_k, digits)))[1:-1]}",
            "[backward]", f"{draw(st.sampled_from(['target', 'dO']))} = {toml(draw(rows(n, 2, digits)))}"]
    return "\n".join(text) + "\n"


@st.composite
def given_dO(draw: st.DrawFn) -> str:
    """Two heads and W_O, with a dO (or a target) of 2–4 decimals: dW_O = concatᵀ·dO reads dO as given."""
    n, width, digits = draw(st.integers(1, 6)), draw(st.integers(1, 3)), draw(st.integers(2, 4))
    text = [f"tokens = {[f't{i}' for i in range(n)]}".replace("'", '"'), f"X = {toml(draw(rows(n, width, 1)))}"]
    for _ in range(2):
        text.append(HEAD.format(q=toml(draw(rows(width, 1, 1))), k=toml(draw(rows(width, 1, 1))),
                                v=toml(draw(rows(width, 1, draw(st.integers(0, 2)))))))
    d_out = draw(st.integers(1, 3))
    text += ["[output]", f"W_O = {toml(draw(rows(2, d_out, draw(st.integers(0, 2)))))}"]
    if draw(st.booleans()):
        text.append(f"b_O = {toml(draw(rows(1, d_out, digits)))[1:-1]}")
    text += ["[backward]", f"{draw(st.sampled_from(['dO', 'target']))} = {toml(draw(rows(n, d_out, digits)))}"]
    return "\n".join(text) + "\n"


@settings(max_examples=25, deadline=None)
@given(normed(), st.integers(1, 4))
def test_norm_by_hand_with_finer_inputs(text: str, decimals: int) -> None:
    by_hand(text, decimals, ("norm", "dnorm"))


@settings(max_examples=25, deadline=None)
@given(qk_normed(), st.integers(1, 4))
def test_qk_norm_by_hand_with_finer_inputs(text: str, decimals: int) -> None:
    by_hand(text, decimals, ("qk_norm", "dqk_norm"))


@settings(max_examples=25, deadline=None)
@given(given_dO(), st.integers(1, 4))
def test_dW_O_by_hand_with_a_finer_dO(text: str, decimals: int) -> None:
    by_hand(text, decimals, ("loss", "dwo"))


def test_a_gain_finer_than_shown_is_shown_as_used() -> None:
    # γ = -0.75 at 1 decimal: the line used -0.75 and says so (before, it read -0.8 beside a result worked with
    # -0.75: 1.5 / 0.9·(-0.8) = -1.2, where a calculator gives -1.3)
    text = ('tokens = ["c"]\nX = [[-0.71, 0.28, 1.53, -0.46]]\n[norm]\nkind = "rms"\ngamma = [0.45, 1.35, -0.75, 0.95]\n'
            + HEAD.format(q="[[1], [0], [0], [0]]", k="[[1], [0], [0], [0]]", v="[[1], [1], [0], [0]]"))
    trace = Trace(compute_hand(compute(parse_scenario(text, "gain.toml")), 1))
    line = next(line for line in stage_lines(trace, 1, ("norm",)).splitlines() if line.startswith("X̂[c,2]"))
    assert line.endswith("= 1.5 / 0.9·(-0.75) = -1.2"), line
    assert_holds(check_text(line, whole=False))


def test_a_query_gain_finer_than_shown_is_shown_as_used() -> None:
    # QK-norm over d_k = 8: q = 3 over a root of 1.0 with γ_q = -0.75 is -2.2 by hand; -0.8 would give -2.4
    text = ('tokens = ["a"]\nX = [[1]]\n'
            + HEAD.format(q="[[3, 0, 0, 0, 0, 0, 0, 0]]", k="[[1, 0, 0, 0, 0, 0, 0, 0]]", v="[[1]]")
            + '[qk_norm]\nover = "head"\ngamma_q = [-0.75, 1, 1, 1, 1, 1, 1, 1]\ngamma_k = [1, 1, 1, 1, 1, 1, 1, 1]\n')
    trace = Trace(compute_hand(compute(parse_scenario(text, "gain.toml")), 1))
    line = next(line for line in stage_lines(trace, 1, ("qk_norm",)).splitlines() if line.startswith("Q̂[a,0]"))
    assert line.endswith("= 3 / 1.0·(-0.75) = -2.2"), line
    assert_holds(check_text(line, whole=False))
