"""Whether a scenario's heads run the softmax at all: [linear] and [deltanet] replace Score … Mix with a
running state of their own (teach/stages/linear.py, teach/stages/deltanet.py); and whether they project Q, K
and V at all ([ssd] reads its own C, B and x)."""

from __future__ import annotations

from qkv_tui.core import part_questions as ask
from qkv_tui.teach.stages.context import TraceContext


def own_stages(trace: TraceContext) -> bool:
    """A part whose record says it has stages of its own ([differential]'s two maps) replaces the one-map stages,
    forward and backward."""
    return any(getattr(r, "own_stages", False) for h in trace.comp.heads for r in h.parts.values())


def softmax_runs(trace: TraceContext) -> bool:
    """False where a table puts a running state in place of every head's softmax ([linear], [deltanet]: its
    ``state``, core/part_questions.py) or a part has stages of its own."""
    return not ask.scenario_has(trace.comp.scenario, "state") and not own_stages(trace)


def heads_project(trace: TraceContext) -> bool:
    """False where a part's record says its heads read no projection of their own (``projects = False``)."""
    return not any(getattr(r, "projects", True) is False for h in trace.comp.heads for r in h.parts.values())
