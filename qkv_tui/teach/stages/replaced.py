"""Whether a scenario's heads run the softmax at all: [linear] and [deltanet] replace Score … Mix with a
running state of their own (teach/stages/linear.py, teach/stages/deltanet.py)."""

from __future__ import annotations

from qkv_tui.teach.stages.context import TraceContext


def own_stages(trace: TraceContext) -> bool:
    """A part whose record says it has stages of its own ([differential]'s two maps) replaces the one-map stages,
    forward and backward."""
    return any(getattr(r, "own_stages", False) for h in trace.comp.heads for r in h.parts.values())


def softmax_runs(trace: TraceContext) -> bool:
    sc = trace.comp.scenario
    return sc.linear is None and getattr(sc, "deltanet", None) is None and not own_stages(trace)
