"""What Qwen3-Next (model_type "qwen3_next") adds to Qwen3.5's layout (hf_qwen35.py): its mixture-of-experts MLP.

As transformers' Qwen3NextSparseMoeBlock computes it, for each token: the router's softmax over every expert
(``mlp.gate``), the top num_experts_per_tok of those probabilities (renormalised to sum 1 with norm_topk_prob),
each chosen expert's SwiGLU weighted by its probability, plus the shared expert's SwiGLU times
σ(x·shared_expert_gate). A layer is sparse unless it is in mlp_only_layers or (i + 1) is not a multiple of
decoder_sparse_step (or num_experts is 0); a dense layer's MLP is the plain SwiGLU. The experts are read
as the Hub stores them (``experts.E.gate_proj`` …) or fused (``experts.gate_up_proj``, ``experts.down_proj``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.hf_config import Config
from qkv_tui.importers.hf_mlp import add_swiglu_experts, read_swiglu, read_swiglu_experts
from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.stack import Array, GatedMlp
from qkv_tui.kernels.gate import sigmoid
from qkv_tui.kernels.softmax import softmax_rows

NOTE = (" Its MLP is a mixture of experts (the router's top experts by softmax probability, plus a shared expert"
        " behind a sigmoid gate); its linear-attention layers run the gated delta rule after a short convolution.")


@dataclass(frozen=True, eq=False)
class SharedExpertMoe:
    W_router: Array  # (d_model, experts)
    W_gate: Array  # (experts, d_model, inner)
    W_up: Array  # (experts, d_model, inner)
    W_down: Array  # (experts, inner, d_model)
    shared: GatedMlp
    W_shared_gate: Array  # (d_model, 1)
    top_k: int
    renormalise: bool
    act: Callable[[Array], Array]

    def __call__(self, x: Array) -> Array:
        probs = softmax_rows(x @ self.W_router).weights  # (n, experts)
        chosen = np.argsort(-probs, axis=1, kind="stable")[:, : self.top_k]  # (n, k), the most probable first
        top = np.take_along_axis(probs, chosen, axis=1)  # (n, k)
        if self.renormalise:
            top = top / top.sum(axis=1, keepdims=True)
        out = sigmoid(x @ self.W_shared_gate) * self.shared(x)  # (n, d_model)
        add_swiglu_experts(out, x, chosen, top, self.W_gate, self.W_up, self.W_down, self.act)
        return out


def _whole(config: Config, key: str, default: int, least: int = 1) -> int:
    value = config.raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ImporterError(f"config.json: {key} = {value!r}; expected a whole number >= {least}")
    return value


def is_sparse(config: Config, layer: int) -> bool:
    only = config.raw.get("mlp_only_layers") or []
    if not isinstance(only, list):
        raise ImporterError("config.json: mlp_only_layers must be a list of layer numbers")
    experts = _whole(config, "num_experts", 512, least=0)
    return layer not in only and experts > 0 and (layer + 1) % _whole(config, "decoder_sparse_step", 1) == 0


def read_moe(config: Config, tensors: TensorFiles, m: str, act: Callable[[Array], Array]) -> SharedExpertMoe:
    """The sparse MLP under ``m`` (a layer's "mlp.")."""
    get, d = tensors.get, config.d_model
    experts, top_k = _whole(config, "num_experts", 512), _whole(config, "num_experts_per_tok", 10)
    if top_k > experts:
        raise ImporterError(f"config.json: num_experts_per_tok = {top_k} is more than num_experts = {experts}")
    W_gate, W_up, W_down = read_swiglu_experts(tensors, m, experts, d)
    shared = read_swiglu(tensors, m + "shared_expert.", d, act)
    return SharedExpertMoe(get(m + "gate.weight", (experts, d)).T, W_gate, W_up, W_down, shared,
                           get(m + "shared_expert_gate.weight", (1, d)).T, top_k,
                           config.raw.get("norm_topk_prob", True) is not False, act)
