"""Hypothesis strategies for `[backward]` beside the tables that define or replace the heads: `[mla]`, `[linear]`,
`[deltanet]` (tests/strategies_latent_state.py draws those).

Each draws one of those scenarios, then a `[backward]` table in each of its forms (docs/backward.md,
docs/scenario-format.md "[backward]"): a target with or without lr, steps and a train list (a subset of the
weights the scenario gives), or dO given directly (no steps). `io=True` adds [deltanet]'s short convolution or
gated output norm (conv_q/k/v, W_Z, gamma_o), beside which the loader refuses [backward] in one line.
"""

from __future__ import annotations

from hypothesis import strategies as st

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import ScenarioError, parse_scenario

from .strategies_latent_state import EXTREME, deltanet_scenarios, linear_scenarios, mla_scenarios
from .variants_cases import number, toml_value

TABLES = {"mla": mla_scenarios, "linear": linear_scenarios, "deltanet": deltanet_scenarios}
# small steps keep a generated run finite: the weights are drawn up to ±3, and a step of lr = 1 can double them
LR = st.sampled_from([0.1, 0.5, 0.01, 1.0])


def _grid(draw: st.DrawFn, rows: int, cols: int, extreme: bool) -> list[list[object]]:
    pick = EXTREME if extreme else number
    return draw(st.lists(st.lists(pick, min_size=cols, max_size=cols), min_size=rows, max_size=rows))


def _io_lines(draw: st.DrawFn, text: str, extreme: bool) -> list[str]:
    """conv_q/k/v (all three), or W_Z with gamma_o (and maybe eps_o), or both, shaped for the scenario's heads."""
    try:
        sc = parse_scenario(text, "io.toml")
    except ScenarioError:  # its shapes are unknown: a conv of the wrong width, refused either way
        return ["conv_q = [[1]]", "conv_k = [[1]]", "conv_v = [[1]]"]
    d_k = sum(int(h.W_Q.shape[1]) for h in sc.heads)
    d_v = sum(int(h.W_V.shape[1]) for h in sc.heads)
    lines: list[str] = []
    conv, norm = draw(st.sampled_from([(True, False), (False, True), (True, True)]))
    if conv:
        taps = draw(st.integers(1, 4))
        lines += [f"conv_q = {toml_value(_grid(draw, taps, d_k, extreme))}",
                  f"conv_k = {toml_value(_grid(draw, taps, d_k, extreme))}",
                  f"conv_v = {toml_value(_grid(draw, taps, d_v, extreme))}"]
    if norm:
        lines += [f"W_Z = {toml_value(_grid(draw, int(sc.X.shape[1]), d_v, extreme))}",
                  f"gamma_o = {toml_value(_grid(draw, 1, int(sc.heads[0].W_V.shape[1]), extreme)[0])}"]
        if draw(st.booleans()):
            lines.append(f"eps_o = {draw(st.sampled_from([1e-6, 0.5]))!r}")
    return lines


def _with_io(text: str, lines: list[str]) -> str:
    """The keys written into the [deltanet] table, wherever it sits among the tables."""
    return text.replace("[deltanet]\n", "[deltanet]\n" + "".join(f"{line}\n" for line in lines), 1)


def _shape(text: str) -> tuple[int, int] | None:
    try:
        n, d_out = compute(parse_scenario(text, "shape.toml")).output.shape
    except ScenarioError:
        return None
    return int(n), int(d_out)


def _given_weights(text: str) -> tuple[str, ...]:
    """The default train list: every weight the scenario gives (core/variants/backward.py, given_weights)."""
    sc = parse_scenario(text, "train.toml")
    assert sc.backward is not None
    return sc.backward.train


@st.composite
def backward_scenarios(draw: st.DrawFn, table: str, extreme: bool = False, io: bool = False) -> str:
    """One of TABLES[table]'s scenarios with a [backward] table after it, in one of its forms."""
    text = draw(TABLES[table](extreme))
    if io and table == "deltanet":
        text = _with_io(text, _io_lines(draw, text, extreme))
    shape = _shape(text)
    n, d_out = shape if shape is not None else (1, 1)  # a refused forward pass: [backward]'s own shape is moot
    key = draw(st.sampled_from(["target", "target", "dO"]))
    lines = ["[backward]", f"{key} = {toml_value(_grid(draw, n, d_out, extreme))}"]
    if draw(st.booleans()):
        lines.append(f"lr = {draw(LR)!r}")
    if key == "target" and draw(st.booleans()):
        lines.append(f"steps = {draw(st.integers(0, 3))}")
    out = text + "\n".join(lines) + "\n"
    if shape is not None and draw(st.booleans()):
        try:
            have = _given_weights(out)
        except ScenarioError:
            return out
        train = draw(st.lists(st.sampled_from(have), min_size=1, max_size=len(have), unique=True))
        out += f"train = {toml_value(train)}\n"
    return out
