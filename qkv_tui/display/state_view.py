"""The decode view of a scenario whose heads keep a state ([linear], [deltanet]): what decoding carries
from one token to the next is the d_k × d_v state, not a KV cache, and a step costs the same at token 3
and at token 3 million. The tiles view of such a scenario says why it has no tiles.

The state's own lines are its part's: the head's record names the display module that writes them
(core/part_questions.py face, ``"state"``), which answers ``lines(hr, t, token, decimals)``, ``states(hr)`` (the
state after each token and each token's output) and ``carried(hr)`` (the numbers carried a step). Every line is
worked from the engine's own numbers for that token (core/engine.py), with operands that recompute the result on
a calculator (teach/arith.py's fit).
"""

from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation, HeadResult
from qkv_tui.core.scenario import Matrix
from qkv_tui.display.frame import Frame
from qkv_tui.display.view import Explanation, PaneSpec, matrix_pane
from qkv_tui.teach.arith import fit

MAX_ROWS = 4  # state rows written out line by line; a wider state is in its pane
STATE_MEANING = (
    "Decoding with a state: each new token updates the dₖ × d_v state its head carries and reads its output"
    " from it. Nothing grows with the text: no Keys or Values are cached, so a step costs the same at every"
    " position. Yellow: this token's output, read from the state after it."  # the o pane is the one marked
)
NO_TILES = (
    "No tiles here: FlashAttention tiles the n × n score matrix of a softmax, and these heads keep a running"
    " state instead, which already never forms that matrix. The decode view (k) steps through the state."
)


def carries_state(comp: Computation) -> bool:
    """Whether the heads keep a state in place of a KV cache: a part's record names a module that writes it."""
    return ask.face(comp.heads, "state") is not None


def as_array(values: Matrix) -> Matrix:
    return np.asarray(values, dtype=float)


def fitted(fn: object, operands: list[float | Matrix], result: float | Matrix, decimals: int) -> tuple[list[str], str]:
    return fit(fn, operands, result, decimals)  # type: ignore[arg-type]


def _face(hr: HeadResult) -> ModuleType:
    """The display module that writes out the state the head carries (display/linear_state.py, …), as its part's
    record names it (core/part_questions.py face)."""
    name = ask.face([hr], "state")
    assert name is not None, "a head that keeps no state"
    return importlib.import_module(f"qkv_tui.display.{name}")


def memory_line(hr: HeadResult, t: int) -> str:
    kept = _face(hr).carried(hr)
    # K and V rows of their own widths: 2·dₖ a token would be false wherever d_v ≠ dₖ
    per_token = hr.d_k + hr.d_v
    seen = f"the {t + 1} tokens so far" if t else "the first token"
    return (f"carried: the state, {kept} numbers at every step; a KV cache would hold K and V of {seen},"
            f" {t + 1}·(dₖ + d_v) = {t + 1}·({hr.d_k} + {hr.d_v}) = {(t + 1) * per_token}, and grow by {per_token}"
            " a token")


def state_lines(comp: Computation, t: int, head: int, decimals: int) -> list[str]:
    hr = comp.heads[head]
    lines: list[str] = _face(hr).lines(hr, t, comp.scenario.labels[t], decimals)
    return [*lines, memory_line(hr, t)]


def _pane(key: str, title: str, values: Matrix, rows: tuple[str, ...], cols: tuple[str, ...], decimals: int,
          current: bool = False) -> PaneSpec:
    one_row = np.atleast_2d(values).shape[0] == 1
    return matrix_pane(key, title, values, rows, cols, decimals, current=(0, None) if current and one_row else None)


def state_frame(comp: Computation, t: int, head: int, decimals: int) -> Frame:
    sc, hr = comp.scenario, comp.heads[head]
    token = sc.labels[t]
    S, out = _face(hr).states(hr)
    idx_k, idx_v = tuple(map(str, range(hr.d_k))), tuple(map(str, range(hr.d_v)))
    before = S[t - 1] if t else np.zeros_like(S[0])
    focus = [_pane("state_prev", "S carried in", before, idx_k, idx_v, decimals),
             _pane("state", f"S after {token}", S[t], idx_k, idx_v, decimals),
             _pane("state_out", f"o[{token}]", out[t], (token,), idx_v, decimals, current=True)]
    lines = state_lines(comp, t, head, decimals)
    heads = len(comp.heads)
    stages = tuple((f"{i + 1} {sc.labels[i]}", "current" if i == t else "done" if i < t else "todo")
                   for i in range(sc.n)) if sc.n <= 7 else ()
    explanation = Explanation(
        stage_label=f"state step {t + 1}/{sc.n}", counter=f'processing "{token}"',
        head_label=f"{hr.name} ({head + 1}/{heads})" if heads > 1 else "", arithmetic=lines[0],
        details=tuple(lines[1:]), meaning=STATE_MEANING,
        formula=(("S", True), (" ← ", False), ("update(S, k, v)", True), ("; o = ", False), ("read(S, q)", True)),
        stages=stages)
    return Frame(explanation, focus, [], (), "")


def no_tiles_frame(comp: Computation, head: int) -> Frame:
    hr = comp.heads[head]
    explanation = Explanation(stage_label="no tiles", counter="", head_label="", arithmetic=NO_TILES,
                              details=(memory_line(hr, comp.scenario.n - 1),), formula=(),
                              meaning="Linear attention has chunked forms of its own (the state handed from chunk to chunk);"
                              " this view is FlashAttention's, for a softmax.")
    return Frame(explanation, [], [], (), "")


def state_section(comp: Computation, decimals: int = 3, worked: int = 8) -> list[str]:
    """The Markdown page's production section for such a scenario: decoding with a state, token by token."""
    sc = comp.scenario
    out = ["## Decoding with a state", "",
           "Each head carries a dₖ × d_v state from one token to the next instead of a KV cache; each token"
           " updates it and reads its output from it, at the same cost at every position. FlashAttention's tiles"
           " do not apply: no n × n score matrix is ever formed.", ""]
    for h, hr in enumerate(comp.heads):
        if len(comp.heads) > 1:
            out += [f"### {hr.name}", ""]
        for t in range(min(sc.n, worked)):
            out.append(f"- step {t + 1}, {sc.labels[t]}:")
            out += [f"    {line}" for line in state_lines(comp, t, h, decimals)]
        if sc.n > worked:
            out.append(f"- steps {worked + 1} to {sc.n}: the same update, one token a step")
        out.append("")
    return out
