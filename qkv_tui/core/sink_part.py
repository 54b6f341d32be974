"""Attention sinks as a part of a head's pass: a head's sink logit joins each row's sum (kernels/sinks.py
SinkSpec), built for core/head_parts.py's HEAD_PARTS."""

from __future__ import annotations

from typing import Any

from qkv_tui.kernels.sinks import SinkSpec


def sink_part(run: Any) -> Any:
    """Each head's sink where it has one (``run`` is core/head_parts.py's Run)."""
    heads = run.sc.heads
    return lambda h: None if (sink := heads[h].sink) is None else SinkSpec(sink)
