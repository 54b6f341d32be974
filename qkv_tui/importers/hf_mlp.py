"""The MLP pieces several Hugging Face families hold in common: the SwiGLU under one prefix; DeepSeek-V3's router
and its grouped top-k choice of experts (MiMo-V2-Flash, Kimi Linear, Nemotron-H, and DeepSeek-V3.2 and GLM through
hf_mimo.py); the SwiGLU experts as the Hub stores them or transformers fuses them, and running the chosen ones
(MiMo-V2-Flash, Kimi Linear, Qwen3-Next). What a family adds (shared experts, latent projections, its own router)
stays in its module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.stack import Array, GatedMlp
from qkv_tui.kernels.gate import sigmoid


def read_swiglu(tensors: TensorFiles, m: str, d: int, act: Callable[[Array], Array]) -> GatedMlp:
    """The SwiGLU under ``m`` (``gate_proj``, ``up_proj``, ``down_proj``: nn.Linear (out, in), transposed)."""
    gate = tensors.get(m + "gate_proj.weight", (None, d))  # (inner, d)
    inner = int(gate.shape[0])
    return GatedMlp(gate.T, tensors.get(m + "up_proj.weight", (inner, d)).T,
                    tensors.get(m + "down_proj.weight", (d, inner)).T, act)


def grouped_top_k(scores: Array, bias: Array, groups: int, top_groups: int, top_k: int, renormalise: bool,
                  scaling: float) -> tuple[NDArray[np.intp], Array]:
    """DeepSeek-V3's choice from σ of the router logits, ``scores`` (n, experts): each token picks its top_k experts
    by score + bias among the top_groups groups of experts whose two best such scores sum highest; the chosen
    experts' scores (not the biased ones) weigh them, renormalised to sum 1 (+ 1e-20), times ``scaling``.
    Returns the chosen experts (n, k), best first, and their weights (n, k)."""
    choice = scores + bias  # (n, experts)
    n, experts = choice.shape
    per_group = np.sort(choice.reshape(n, groups, experts // groups), axis=2)[:, :, -2:].sum(axis=2)
    kept = np.argsort(-per_group, axis=1, kind="stable")[:, :top_groups]  # (n, top_groups)
    allowed = np.zeros((n, groups), dtype=bool)
    np.put_along_axis(allowed, kept, True, axis=1)
    choice = np.where(np.repeat(allowed, experts // groups, axis=1), choice, -np.inf)
    chosen = np.argsort(-choice, axis=1, kind="stable")[:, :top_k]  # (n, k)
    weights = np.take_along_axis(scores, chosen, axis=1)  # (n, k)
    if renormalise:
        weights = weights / (weights.sum(axis=1, keepdims=True) + 1e-20)
    return chosen, weights * scaling


@dataclass(frozen=True, eq=False)
class GroupedRouter:
    """DeepSeek-V3's router: σ of the router logits, then :func:`grouped_top_k`."""

    W_router: Array  # (d_model, experts)
    bias: Array  # (experts,) e_score_correction_bias: it steers the choice only
    top_k: int
    groups: int
    top_groups: int
    renormalise: bool
    scaling: float

    def choose(self, x: Array) -> tuple[NDArray[np.intp], Array]:
        """Each row of ``x``'s chosen experts (n, k) and their weights (n, k)."""
        scores = sigmoid(x @ self.W_router)  # (n, experts)
        return grouped_top_k(scores, self.bias, self.groups, self.top_groups, self.top_k, self.renormalise, self.scaling)


def read_router(tensors: TensorFiles, m: str, experts: int, d: int, top_k: int, groups: int, top_groups: int,
                renormalise: bool, scaling: float) -> GroupedRouter:
    """The router under ``m`` (``gate.weight``, and ``gate.e_score_correction_bias`` or zeros where the checkpoint
    has none: it only steers the choice)."""
    name = m + "gate.e_score_correction_bias"
    bias = tensors.get(name, (experts,)) if name in tensors else np.zeros(experts)
    return GroupedRouter(tensors.get(m + "gate.weight", (experts, d)).T, bias, top_k, groups, top_groups, renormalise,
                         scaling)


def read_swiglu_experts(tensors: TensorFiles, m: str, experts: int, d: int, gate: str = "gate_proj",
                        up: str = "up_proj", down: str = "down_proj") -> tuple[Array, Array, Array]:
    """The SwiGLU experts under ``m`` as (W_gate, W_up (experts, d, inner), W_down (experts, inner, d)): one
    nn.Linear a projection an expert, ``experts.E.<gate>`` (the Hub's, whose names differ by family), or
    transformers' fused ``experts.gate_up_proj`` and ``experts.down_proj``."""
    get = tensors.get
    if m + "experts.gate_up_proj" in tensors:  # (experts, 2·inner, d): gate rows, then up rows
        fused = get(m + "experts.gate_up_proj", (experts, None, d))
        inner = int(fused.shape[1]) // 2
        W_gate, W_up = fused[:, :inner].transpose(0, 2, 1), fused[:, inner:].transpose(0, 2, 1)
        W_down = get(m + "experts.down_proj", (experts, d, inner)).transpose(0, 2, 1)
        return W_gate, W_up, W_down
    gates = [get(f"{m}experts.{e}.{gate}.weight", (None, d)) for e in range(experts)]  # (inner, d) each
    inner = int(gates[0].shape[0])
    W_gate = np.stack([g.T for g in gates])
    W_up = np.stack([get(f"{m}experts.{e}.{up}.weight", (inner, d)).T for e in range(experts)])
    W_down = np.stack([get(f"{m}experts.{e}.{down}.weight", (d, inner)).T for e in range(experts)])
    return W_gate, W_up, W_down


def add_swiglu_experts(out: Array, x: Array, chosen: NDArray[np.intp], weights: Array, W_gate: Array, W_up: Array,
                       W_down: Array, act: Callable[[Array], Array]) -> None:
    """Adds to each row of ``out`` its chosen experts' SwiGLU of that row of ``x``, each times its weight."""
    for row in range(x.shape[0]):
        for slot in range(chosen.shape[1]):
            e = int(chosen[row, slot])
            hidden = act(x[row] @ W_gate[e]) * (x[row] @ W_up[e])  # (inner,)
            out[row] += weights[row, slot] * (hidden @ W_down[e])
