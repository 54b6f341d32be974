"""The output gate read backwards ([[heads]] W_G): joined = output ⊙ σ(X̂·W_G), from the gradient at what Concat joins
back to the head's own output (kernels/gate_backward.py), and the gate's own path into X̂ through W_G."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkv_tui.core.grad_faces import GradFace, Path
from qkv_tui.core.variants import gate
from qkv_tui.kernels.gate import Gated
from qkv_tui.kernels.gate_backward import GateBack, gate_backward

if TYPE_CHECKING:
    from qkv_tui.core.gradients import HeadGrad
    from qkv_tui.core.head import HeadResult
    from qkv_tui.core.scenario import Matrix
    from qkv_tui.kernels.policy import Policy


def output_back(h: HeadResult, dJ: Matrix, X_in: Matrix, p: Policy) -> tuple[Matrix, GateBack] | None:
    gated = h.part(Gated)
    if gated is None:
        return None
    gb = gate_backward(dJ, X_in, gated.W_G, h.output, gated.gate, p)
    return gb.d_output, gb


def paths(h: HeadResult, hg: HeadGrad) -> list[Path]:
    gb, gated = hg.part(GateBack), h.part(Gated)
    return [] if gb is None or gated is None else [(gb.d_logit, gated.W_G)]


FACE = GradFace(gate.KEYS, output_back=output_back, paths=paths)
