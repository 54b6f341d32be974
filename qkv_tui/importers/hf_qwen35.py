"""What Qwen3.5's full-attention layers (model_type "qwen3_5", "qwen3_5_text") add to the LLaMA layout.

As transformers' Qwen3_5Attention computes it:
- q_proj outputs each head's query and its output gate together, per head: rows h·2·d_k … h·2·d_k + d_k − 1
  are head h's query, the next d_k its gate (``view(…, H, 2·d_k)`` then ``chunk(2)``), so W_Q and W_G
  are cut from those rows, not from two halves of the matrix;
- the gate is per element: each head's output ⊙ σ(X̂·W_G_h) before o_proj, the format's [gate];
- every RMSNorm multiplies by (1 + γ) (the checkpoint stores γ − 1), the QK-norm per head included;
- partial rotary (partial_rotary_factor, 0.25 by default) and the multimodal RoPE, which for text alone
  turns every section by the same position: plain RoPE on the first quarter of each head.
Its linear-attention layers (Gated DeltaNet) are hf_gated_deltanet.py's.
"""

from __future__ import annotations

from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.hf_config import Config, layer_type
from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.stack import Array

NOTE = ("Qwen3.5's norms multiply by 1 + γ (the checkpoint stores γ − 1; the gains here are 1 + the stored weight),"
        " its q_proj gives each head's query and output gate side by side, and the gate σ(X̂·W_G) multiplies each"
        " head's output cell by cell before W_O.")


def query_and_gate(config: Config, tensors: TensorFiles, a: str) -> tuple[Array, Array]:
    """W_Q and W_G (each d_model × H·d_k, x·W orientation) from q_proj's interleaved per-head rows."""
    d, heads, d_k = config.d_model, config.num_heads, config.head_dim
    if a + "q_proj.bias" in tensors:
        raise ImporterError("config.json: attention_bias = true is not supported for Qwen3.5 (its output gate has no bias)")
    rows = tensors.get(a + "q_proj.weight", (2 * heads * d_k, d)).reshape(heads, 2, d_k, d)  # (H, [q | gate], d_k, d)
    return rows[:, 0].reshape(heads * d_k, d).T, rows[:, 1].reshape(heads * d_k, d).T


def schedule(config: Config) -> tuple[str, ...]:
    """The [input] schedule from layer_types (or full_attention_interval): "full" or "linear" (Gated DeltaNet)."""
    return tuple("full" if layer_type(config, i) == "full_attention" else "linear" for i in range(config.num_layers))
