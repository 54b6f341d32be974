"""Positions and the moves between them."""

from __future__ import annotations

from qkv_tui import compute, load_scenario
from qkv_tui.teach.stepper import Position, Stepper
from qkv_tui.teach.trace import Trace


def stepper(name: str) -> Stepper:
    return Stepper(Trace(compute(load_scenario(name))))


def test_forward_and_back_are_exact() -> None:
    s = stepper("two_heads")
    pos = s.start()
    seen = [pos]
    for _ in range(len(s.trace) - 1):
        pos = s.next(pos)
        seen.append(pos)
    assert pos.index == s.last_index
    assert s.next(pos) == pos  # clamped at the end
    for expected in reversed(seen[:-1]):
        pos = s.prev(pos)
        assert pos.index == expected.index
    assert s.prev(pos) == pos


def test_stage_jumps() -> None:
    s = stepper("i_love_ai")
    pos = s.start()
    starts = []
    while True:
        starts.append(pos.index)
        nxt = s.next_stage(pos)
        if nxt.index == pos.index or (nxt.index == s.last_index and pos.index >= 57):
            break
        pos = nxt
    assert starts == [0, 3, 30, 39, 48, 57]
    mid = Position(44, 0)
    assert s.prev_stage(mid).index == 39
    assert s.prev_stage(Position(39, 0)).index == 30
    assert s.prev_stage(Position(0, 0)).index == 0
    assert s.stage(mid, 5).index == 48
    assert s.stage(mid, 9) == mid


def test_switch_head_keeps_the_step_within_the_stage() -> None:
    s = stepper("two_heads")
    score_h0 = next(r for r in s.trace.runs if r.stage == "score" and r.head == 0)
    score_h1 = next(r for r in s.trace.runs if r.stage == "score" and r.head == 1)
    pos = s.goto(Position(0, 0), score_h0.start + 4)
    other = s.switch_head(pos, 1)
    assert other == Position(score_h1.start + 4, 1)
    assert s.switch_head(other, -1) == pos
    end = s.last(pos)
    assert s.switch_head(end, 1) == Position(end.index, (end.head + 1) % 2)


def test_view_follows_the_head_of_the_operation() -> None:
    s = stepper("split_heads")
    second = next(r for r in s.trace.runs if r.head == 1)
    assert s.goto(Position(0, 0), second.start).head == 1
    assert s.stage(Position(second.start, 1), 2).index == second.start


def _row_ends(s: Stepper) -> list[int]:
    """Every operation after which its matrix row is complete, found from the operations themselves."""
    trace = s.trace
    ends = []
    for i in range(len(trace)):
        op = trace.op(i)
        nxt = trace.op(i + 1) if i + 1 < len(trace) else None
        if nxt is None or nxt.segment != op.segment or nxt.row != op.row:
            ends.append(i)
    return ends


def test_row_steps_stop_at_every_row_end_and_back() -> None:
    for name in ("i_love_ai", "two_heads", "cross_attention", "split_heads"):
        s = stepper(name)
        ends = _row_ends(s)
        pos, seen = s.start(), []
        while True:
            seen.append(pos.index)
            nxt = s.next_row(pos)
            if nxt == pos:
                break
            pos = nxt
        assert seen == ends, name  # the start (row X[0], one operation) is itself a row end
        for expected in reversed(ends[:-1]):
            pos = s.prev_row(pos)
            assert pos.index == expected, name
        assert s.prev_row(pos) == pos


def test_a_row_step_from_inside_a_row_finishes_it_and_back_blanks_it() -> None:
    s = stepper("i_love_ai")
    q_row_1 = Position(3 + 3 + 1, 0)  # Project starts at 3; Q[love,1]
    done = s.next_row(q_row_1)
    assert done.index == 3 + 5  # Q[love,2], the row's last cell
    op = s.trace.op(done.index)
    assert (op.segment.target, op.row, op.col) == ("Q", 1, 2)
    assert s.prev_row(q_row_1).index == 3 + 2  # Q[I] whole, Q[love] blank again
