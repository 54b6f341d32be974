"""The modern variants in plain words, for the app's help and notes screens.

Their arithmetic lives with the stage each one changes (:mod:`qkv_tui.teach.stages`): norm.py,
project's ``+ b``, rotate.py, scale's ALiBi term and softmax's sink.
"""

from __future__ import annotations

__all__ = ["VARIANT_NOTES"]

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
    ("Soft-cap (softcap)",
     "Gemma 2 turns each scaled score s into c·tanh(s/c) before the bias and the mask (c = 50): a score small"
     " next to c (|s| ≪ c) stays almost as it was, and none passes ±c, so no logit can run away. Backwards the"
     " cap's slope 1 − tanh²(s/c) multiplies the gradient: dscaled = dS·(1 − tanh²(s/c)), so a capped score"
     " barely learns. Gemma 3 replaced the cap by QK-norm."),
    ("Another scale (scale, scale_from)",
     "Not every model divides by √dₖ: Gemma 2 27B divides by √query_pre_attn_scalar = √144 = 12 with"
     " dₖ = 128, and Granite multiplies the scores by attention_multiplier (a scale of 1/attention_multiplier)."
     " scale sets the number and scale_from says in words where it came from; the Scale stage quotes it."),
    ("Partial rotary ([rope] partial)",
     "GPT-NeoX, Phi and Qwen3-Next turn only the first r = int(partial·dₖ) dimensions of each head"
     " (Hugging Face's partial_rotary_factor), with θᵢ = base^(−2i/r); the others pass through unchanged,"
     " so their part of each score ignores position."),
    ("RoPE scaling and YaRN ([rope.scaling])",
     "To read past the context a model was trained on (L = original_max_position_embeddings) the"
     " frequencies are lowered. linear divides every θ by the factor; llama3 keeps the pairs whose"
     " wavelength 2π/θ is below L/high_freq_factor, divides those above L/low_freq_factor and blends"
     " between. YaRN judges a pair by how many times it turns over L, L·θ/2π: more than beta_fast (32) and"
     " it is kept, fewer than beta_slow (1) and it is divided, a ramp between (transformers clamps the"
     " ramp's start to pair 0, so pair 0 is kept even where it turns fewer times). YaRN also multiplies cos"
     " and sin by a = 0.1·ln(factor) + 1 by default, so each score carries a² (under partial rotary only"
     " the turned dimensions' part of it)."),
    ("The output gate (W_G, [gate])",
     "Qwen3-Next and Qwen3.5 multiply each head's output, cell by cell, by g = σ(X̂·W_G), between 0 and 1"
     " and computed by the query token (Qiu et al. 2025). It is a non-linearity between W_V and W_O, which"
     " otherwise multiply into one low-rank linear map, and a gate near 0 lets a head say nothing for a token"
     " without parking weight on a sink; Qiu et al. found it mitigates attention sinks and massive"
     " activations."),
    ("Layer schedules ([input] schedule)",
     "A model's layers need not be alike. Gemma 2 alternates sliding-window (4,096 keys) and full layers;"
     " Gemma 3 has five local layers to each global one, the local ones with their own RoPE base (10,000"
     " against 1,000,000); SmolLM3 leaves RoPE out of every fourth layer; Qwen3-Next has three"
     " linear-attention layers (the gated delta rule) to each full one. A scenario is one layer: the"
     " schedule names them all, and its line shows where this one sits."),
    ("Latent attention ([mla])",
     "DeepSeek-V2 and V3 cache one latent row per token and layer instead of every head's K and V: c_KV ="
     " X·W_DKV (d_c = 512) and one rotary key k_R shared by the heads (d_rope = 64), 576 numbers, where"
     " multi-head attention with their 128 heads would keep 2·n_h·d_h = 32,768 (DeepSeek-V2's Table 1"
     " counts it so, with d_h = 128). Each head expands the latent into its keys and values; the Absorb"
     " stage gets the same scores without expanding, W_UK folded into the query. Only q_R and k_R turn with"
     " position. With YaRN ([rope.scaling] type = \"yarn\"), DeepSeek multiplies the softmax scale by m², m ="
     " 0.1·mscale_all_dim·ln(factor) + 1, and cos and sin by a = m(mscale) / m(mscale_all_dim) (1 where the two"
     " are equal, as in DeepSeek-V3's config): [mla] does both, and its Scale stage divides by √d_qk / m²."),
    ("Linear attention ([linear])",
     "Katharopoulos et al. (2020) replace the softmax's e^(q·k/√dₖ) by φ(q)·φ(k). That similarity factorises,"
     " so by associativity the keys' sums Σφ(k)vᵀ can be kept as a running state, whatever φ is: decoding"
     " keeps a dₖ × d_v state (and dₖ for the normaliser) where softmax attention keeps a KV cache of"
     " n·(dₖ + d_v) numbers that grows with every token and is read whole at each step. A φ ≥ 0 (elu + 1)"
     " keeps every similarity ≥ 0, as e^x is."),
    ("The gated delta rule ([deltanet])",
     "Gated DeltaNet (Yang et al. 2024), the linear-attention layers of Qwen3-Next and Qwen3.5, keeps a state"
     " too but writes only what is new: the state fades by e^g, recalls kv = Sᵀk for the new key, and stores"
     " δ = (v − kv)·β. With unit keys the write is an exact overwrite at k, Sᵀk = (1 − β)·old + β·v. Each"
     " token computes its own g and β from X̂, so how fast the past fades depends on the tokens."),
    ("The backward pass and the Train view ([backward])",
     "With a [backward] table the trace goes on past the output: the loss ½·Σ(output − target)² (or a given"
     " dO), then every gradient cell by cell, each backward stage the chain rule through one forward step,"
     " last step first (dSoftmax: dS = P ⊙ (dP − D), D = rowsum(dO ⊙ O)). The Train view (l) takes SGD"
     " steps, w ← w − lr·∂loss/∂w on the weights train names, and shows the loss and the attention map"
     " move step by step."),
)
