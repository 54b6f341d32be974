"""Where the learner is in the trace: an immutable position and the moves between positions.

A position is the index of the current operation (everything up to and including it
is computed) and the head being viewed. Every screen is a pure function of
(computation, position), so stepping forward N times and back N times restores it.
"""

from __future__ import annotations

import bisect

from qkv_tui.base.fixed import fixed
from qkv_tui.teach.trace import StageRun, Trace


@fixed(eq=True)
class Position:
    """Where the stepper stands in the trace."""

    index: int  # the current operation; 0 .. len(trace) - 1
    head: int  # the head whose panes are shown


class Stepper:
    """Moves over a trace; every method returns a new Position."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self._run_starts = [r.start for r in trace.runs]

    @property
    def last_index(self) -> int:
        return len(self.trace) - 1

    @property
    def head_count(self) -> int:
        return len(self.trace.comp.heads)

    def start(self) -> Position:
        return self.goto(Position(0, 0), 0)

    def run_of(self, index: int) -> StageRun:
        return self.trace.runs[bisect.bisect_right(self._run_starts, index) - 1]

    def goto(self, pos: Position, index: int) -> Position:
        """Operation ``index`` (clamped); the view follows the head that operation belongs to."""
        index = min(max(index, 0), self.last_index)
        head = self.run_of(index).head
        return Position(index, pos.head if head is None else head)

    def next(self, pos: Position) -> Position:
        return self.goto(pos, pos.index + 1)

    def prev(self, pos: Position) -> Position:
        return self.goto(pos, pos.index - 1)

    def first(self, pos: Position) -> Position:
        return self.goto(pos, 0)

    def last(self, pos: Position) -> Position:
        return self.goto(pos, self.last_index)

    def row_end(self, index: int) -> int:
        """The last operation of the matrix row that operation ``index`` helps fill."""
        seg = self.trace.segment_at(index)
        if seg.per_row:
            return index
        row = (index - seg.start) // seg.cols
        return seg.start + (row + 1) * seg.cols - 1

    def next_row(self, pos: Position) -> Position:
        """Finish the row being filled; at a row's end, fill the whole next row (a lecture's pace)."""
        return self.goto(pos, self.row_end(min(pos.index + 1, self.last_index)))

    def prev_row(self, pos: Position) -> Position:
        """Back to the end of the previous row: the row being filled becomes blank again."""
        seg = self.trace.segment_at(pos.index)
        return self.goto(pos, self.row_end(pos.index) - (1 if seg.per_row else seg.cols))

    def next_stage(self, pos: Position) -> Position:
        """The first operation of the next stage (of this head, then the next head's)."""
        i = bisect.bisect_right(self._run_starts, pos.index)
        if i >= len(self._run_starts):
            return self.last(pos)
        return self.goto(pos, self._run_starts[i])

    def prev_stage(self, pos: Position) -> Position:
        """The start of this stage, or of the previous one when already at a start."""
        run = self.run_of(pos.index)
        if pos.index > run.start:
            return self.goto(pos, run.start)
        i = self.trace.runs.index(run)
        return self.goto(pos, self.trace.runs[i - 1].start) if i > 0 else pos

    def stage(self, pos: Position, number: int) -> Position:
        """Jump to stage ``number`` (1-based, as in ``3/6 Score``) of the viewed head."""
        keys = self.trace.stage_keys
        if not 1 <= number <= len(keys):
            return pos
        key = keys[number - 1]
        for run in self.trace.runs:
            if run.stage == key and run.head in (None, pos.head):
                return self.goto(pos, run.start)
        return pos

    def switch_head(self, pos: Position, by: int) -> Position:
        """View another head; inside a per-head stage, go to the same step of that head's stage."""
        if self.head_count == 1:
            return pos
        new_head = (pos.head + by) % self.head_count
        run = self.run_of(pos.index)
        if run.head is None:
            return Position(pos.index, new_head)
        twin = next(r for r in self.trace.runs if r.stage == run.stage and r.head == new_head)
        offset = pos.index - run.start
        return self.goto(pos, min(twin.start + offset, twin.stop - 1))
