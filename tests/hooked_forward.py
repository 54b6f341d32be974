"""Catching what transformers' eager forward computes inside a layer: the importer tests compare against it.

The callers have already skipped where torch is missing (pytest.importorskip), so torch is imported on use."""

from __future__ import annotations

from typing import Any

import numpy as np


def forward_hooked(model: Any, ids: list[int], hooks: list[Any], **how: Any) -> Any:
    """The model's forward on one sequence of ``ids``, without gradients; ``hooks`` (handles of hooks already
    registered) are removed after it, even when it raises, so the model runs clean in the next test."""
    import torch

    try:
        with torch.no_grad():
            return model(input_ids=torch.tensor([ids]), **how)
    finally:
        for h in hooks:
            h.remove()


def catch_o_proj(o_proj: Any, seen: dict[str, np.ndarray]) -> list[Any]:
    """Hooks on an attention's output projection: its input, the heads' merged outputs (``seen["merged"]``), and its
    output (``seen["attn"]``), the first sequence of the batch."""

    def before_o(module: Any, args: tuple[Any, ...]) -> None:
        seen["merged"] = args[0][0].detach().numpy().copy()

    def after_o(module: Any, args: tuple[Any, ...], out: Any) -> None:
        seen["attn"] = out[0].detach().numpy().copy()

    return [o_proj.register_forward_pre_hook(before_o), o_proj.register_forward_hook(after_o)]
