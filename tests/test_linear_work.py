"""The Markdown export's work grows in proportion to the number of heads, never with its square.

Not a timed test: it counts how many times the export visits a head (an element of the scenario's
or the computation's tuple of heads). Looking a head up is one visit; a loop over every head, done
once per column label or once per head, is what made 300 heads take a minute, and shows up here as
a count that grows 16-fold when the heads grow 4-fold.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any, SupportsIndex

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.edges.export_markdown import WORKED_ROWS, to_markdown, worked_ops
from qkv_tui.teach.trace import Trace


class Visits:
    count = 0


class CountedHeads(tuple):  # type: ignore[type-arg]
    """A tuple of heads that counts every element it hands out."""

    def __iter__(self) -> Iterator[Any]:
        for item in super().__iter__():
            Visits.count += 1
            yield item

    def __getitem__(self, index: SupportsIndex | slice) -> Any:  # type: ignore[override]
        item = super().__getitem__(index)
        Visits.count += len(item) if isinstance(index, slice) else 1
        return item


def scenario_text(heads: int, kv_heads: int | None) -> str:
    """``heads`` heads of d_k = d_v = 1 cut from one wide matrix per role (shared K/V heads where
    ``kv_heads`` is set), and a W_O that joins them."""
    kv = kv_heads or heads

    def row(width: int, shift: int) -> str:
        return "[" + ", ".join(str((i + shift) % 3 - 1) for i in range(width)) + "]"

    shared = f"num_kv_heads = {kv}\n" if kv_heads else ""
    return (
        'tokens = ["a", "b"]\nX = [[1, 0], [0, 1]]\nmask = "causal"\n'
        f"[attention]\nnum_heads = {heads}\n{shared}"
        f"W_Q = [{row(heads, 0)}, {row(heads, 1)}]\nW_K = [{row(kv, 2)}, {row(kv, 0)}]\n"
        f"W_V = [{row(kv, 1)}, {row(kv, 2)}]\n"
        "[output]\nW_O = [" + ", ".join("[1]" for _ in range(heads)) + "]\n"
    )


def visits(heads: int, kv_heads: int | None) -> int:
    sc = parse_scenario(scenario_text(heads, kv_heads), "heads.toml")
    sc = replace(sc, heads=CountedHeads(sc.heads))
    comp = compute(sc)
    comp = replace(comp, heads=CountedHeads(comp.heads))
    Visits.count = 0
    to_markdown(comp)
    return Visits.count


@pytest.mark.parametrize("kv", [False, True], ids=["own_kv", "grouped_kv"])
def test_markdown_visits_each_head_a_bounded_number_of_times(kv: bool) -> None:
    small, large = 12, 48
    few = visits(small, small // 2 if kv else None)
    many = visits(large, large // 2 if kv else None)
    assert few > 0
    # linear work: 4 times the heads, 4 times the visits (a little slack for per-page constants);
    # a walk over every head per column or per head would give about 16 times
    assert many <= 4.5 * few, (few, many)


def test_markdown_builds_only_the_operations_it_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows past WORKED_ROWS are in the tables but not worked line by line: their operations are not built."""
    n = WORKED_ROWS + 4
    tokens = ", ".join(f'"t{i}"' for i in range(n))
    X = ", ".join(f"[{i % 3 - 1}, {i % 2}]" for i in range(n))
    sc = parse_scenario(f"tokens = [{tokens}]\nX = [{X}]\n[[heads]]\nW_Q = [[1], [0]]\nW_K = [[0], [1]]\n"
                        "W_V = [[1], [1]]\n", "tall.toml")
    trace = Trace(compute(sc))
    for run in trace.runs:
        ops = worked_ops(trace, run.start, run.stop)
        assert all(trace.op(i).row < WORKED_ROWS for i in ops)
        rows = {(trace.op(i).segment.target, trace.op(i).row) for i in range(run.start, run.stop)}
        worked = {(trace.op(i).segment.target, trace.op(i).row) for i in ops}
        assert worked == {(t, r) for t, r in rows if r < WORKED_ROWS}  # every worked row, whole
    built: list[int] = []
    original = Trace._build

    def counting(self: Trace, index: int, decimals: int = 3) -> Any:
        built.append(index)
        return original(self, index, decimals)

    monkeypatch.setattr(Trace, "_build", counting)
    to_markdown(compute(sc))
    assert built and len(built) == len(set(built))
    segments = [s for s in Trace(compute(sc)).segments if s.stage not in ("embed", "concat")]
    assert len(built) == sum(min(s.rows, WORKED_ROWS) * (1 if s.per_row else s.cols) for s in segments)
