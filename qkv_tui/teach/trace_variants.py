"""The modern variants in plain words, for the app's help and notes screens.

Their arithmetic lives with the stage each one changes (:mod:`qkv_tui.teach.stages`): norm.py,
project's ``+ b``, rotate.py, scale's ALiBi term and softmax's sink. ``sink_row`` is still read from here.
"""

from __future__ import annotations

from qkv_tui.teach.stages.softmax import sink_row

__all__ = ["VARIANT_NOTES", "sink_row"]

# Plain-words notes on each variant, for the app's help and notes screens
VARIANT_NOTES = (
    ("Pre-norm ([norm])",
     "Modern models rescale each token's row of X before attention, so no token shouts louder than another."
     " RMSNorm divides by the root mean square (LLaMA, Mistral, Qwen); LayerNorm also centres the row and"
     " adds a shift (GPT-2). The Norm stage works each cell: x / √(mean of squares + eps) · γ."),
    ("Biases (b_Q, b_K, b_V, b_O)",
     "Some models (GPT-2, Qwen2) add a learned number to every column of a projection: Q = X·W_Q + b_Q."
     " Each projected cell then ends in '+ b'."),
    ("QK-norm ([qk_norm])",
     "Qwen3, Gemma 3 and OLMo 2 RMS-normalise every query and key vector after the projection, before RoPE,"
     " so however large W_Q and W_K grow, the gains bound a score: the logits stay bounded and training"
     " stays stable (Gemma 3 dropped Gemma 2's logit soft-capping for it)."
     " Qwen3 and Gemma 3 normalise each head's vector on its own, so before its gains each has length √dₖ;"
     " OLMo 2 normalises a token's whole projection, every head's columns together, before cutting it into"
     " heads, so the whole row has length √(its width) and one head's part need not have length √dₖ."),
    ("RoPE ([rope])",
     "Instead of adding positions to X, RoPE turns each pair of Q and K dimensions by an angle that grows"
     " with the token's position. A rotation keeps lengths, and when both q and k are turned, position"
     " reaches their dot product only through the difference of the angles (Su et al., RoFormer §3.2): a"
     " score depends on the two vectors and on how far apart the tokens are, not on where they sit."
     " Libraries pair dimensions differently: interleaved (0,1), (2,3) in the RoFormer paper and Meta's"
     " LLaMA code; half (0, d/2), … in GPT-NeoX and Hugging Face's LLaMA code. Hugging Face's LLaMA"
     " checkpoints are Meta's weights with each head's W_Q and W_K columns permuted (evens first, then odds;"
     " its convert_llama_weights_to_hf.py), so each"
     " layout gives the same scores with its own weights; the same weights in the wrong layout give wrong"
     " numbers (the rope_layouts scenario shows both)."),
    ("Grouped-query and multi-query attention (num_kv_heads)",
     "Several query heads can share one Key/Value head (Ainslie et al. 2023): each still asks its own"
     " question, but they look things up in the same K and V. The KV cache shrinks by num_heads /"
     " num_kv_heads: 8 times in LLaMA 2 70B (64 query heads, 8 K/V heads), 4 times in Mistral 7B (32 and 8);"
     " LLaMA 2 7B and 13B use plain multi-head attention. num_kv_heads = 1 is multi-query attention"
     " (Shazeer 2019)."),
    ("ALiBi ([alibi])",
     "No position vectors at all (Press et al. 2022): each head adds slope·(j − i) to its scaled scores, a"
     " penalty that grows the further back a key is. Steep heads favour nearby keys, gentle heads reach further."),
    ("Sliding windows (kind = \"sliding\")",
     "A causal mask that also forgets: each token sees itself and the window − 1 tokens before it, so the"
     " KV cache never holds more than the window. Libraries count the window differently. Here a window W"
     " means 0 ≤ i − j < W: W keys, the query's own included, as Hugging Face transformers and gpt-oss count"
     " their sliding_window. FlashAttention writes the same window as window_size = (W − 1, 0); in the"
     " Mistral paper position i sees i − W … i, so its window W holds one key more."),
    ("What masked cells hold",
     "Here a masked score is −∞, as PyTorch's scaled_dot_product_attention makes it from a boolean mask;"
     " Hugging Face transformers' eager attention adds torch.finfo(dtype).min instead, and the original"
     " BERT code adds −10000. While a row keeps one allowed key, all three give masked keys weight 0. A row"
     " with every key masked is where they part: a plain softmax of −∞ everywhere is 0/0 = NaN (PyTorch"
     " 2.13's scaled_dot_product_attention returns a zero row instead), finfo.min gives every key the same"
     " weight, and −10000 gives, to float32 rounding, the row's unmasked softmax. This app refuses such a"
     " row."),
    ("Attention sinks (sink, sinks)",
     "Softmax must hand out 100% of a row. Trained models often park the spare share on the first tokens"
     " (Xiao et al. 2023 named them attention sinks); gpt-oss instead gives each head one extra learned"
     " logit that takes part in the softmax and is then thrown away, so a head can put its attention"
     " 'nowhere' and its weights sum to less than 1."),
)
