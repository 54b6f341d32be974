"""Whether a scenario's heads run the softmax at all: [linear] and [deltanet] replace Score … Mix with a
running state of their own (teach/stages/linear.py, teach/stages/deltanet.py)."""

from __future__ import annotations

from qkv_tui.teach.stages.context import TraceContext


def softmax_runs(trace: TraceContext) -> bool:
    sc = trace.comp.scenario
    return sc.linear is None and getattr(sc, "deltanet", None) is None
