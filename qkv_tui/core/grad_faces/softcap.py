"""The soft-cap read backwards: its step's slope, for the softmax backward (dscaled = dS ⊙ (1 − tanh²(scaled / c)));
a part that reads its own maps back takes the cap c from the record (kernels/differential_backward.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from qkv_tui.core.grad_faces import GradFace
from qkv_tui.core.variants import softcap
from qkv_tui.kernels.softcap import Capped

if TYPE_CHECKING:
    from qkv_tui.core.head import HeadResult


def options(h: HeadResult) -> Mapping[str, Any]:
    capped = h.part(Capped)
    return {} if capped is None else {"step": capped}


FACE = GradFace(softcap.KEYS, options=options)
