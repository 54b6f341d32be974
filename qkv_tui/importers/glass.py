"""glassllm's packaged models ("glassllm:en", "glassllm:pt"): read through glassllm's own loader.

glassllm (PyPI, MIT, NumPy only) ships two small trained decoders: 4 layers, d_model 128, 4
query heads sharing 2 K/V heads (d_k 32), RMSNorm (eps 1e-6), interleaved RoPE (pairs 2i, 2i+1,
base 10000), SwiGLU, 128 positions. Its matrices are already in the x·W orientation and its heads
are column slices (``x @ W_Q`` reshaped to (n, H, d_k)), which is the scenario format's [attention] (docs/scenario-format.md).
Its tokenizer adds no special tokens.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from qkv_tui.base.values import token_label
from qkv_tui.importers.errors import ImporterError, missing_package
from qkv_tui.importers.stack import Array, Attention, GatedMlp, Layer, Model, Norm, Rope, _silu

PREFIX = "glassllm:"


@lru_cache(maxsize=2)  # the app reloads files; the weights stay put
def open_glassllm(lang: str) -> Model:
    try:
        import glassllm
    except ImportError:
        raise ImporterError(missing_package("glassllm", f"model.source {PREFIX}{lang}")) from None
    if lang not in glassllm.LANGUAGES:
        choices = ", ".join(f"{PREFIX}{x}" for x in glassllm.LANGUAGES)
        raise ImporterError(f"model.source {PREFIX}{lang!r} is not a glassllm model; expected one of: {choices}")
    try:
        model, tokenizer = glassllm.load_pretrained(lang)
    except (OSError, ValueError) as exc:
        raise ImporterError(f"glassllm's {lang!r} model cannot be loaded: {exc}") from None
    cfg = model.cfg
    params: dict[str, Array] = {name: np.asarray(p.data, dtype=np.float64) for name, p in model.named_parameters().items()}
    embedding = params["E"]

    def tokenize(text: str) -> tuple[list[str], list[int]]:
        ids = [int(i) for i in tokenizer.encode(text)]
        return [token_label(t) for t in tokenizer.tokens(ids)], ids

    def embed(ids: list[int]) -> Array:
        return embedding[ids]  # (n, d_model); positions enter through RoPE, not here

    def layer(i: int) -> Layer:
        p = f"blocks.{i}."
        return Layer(
            norm=Norm("rms", params[p + "norm1.gamma"], None, float(cfg.eps)),
            attention=Attention(
                params[p + "attn.W_Q"], params[p + "attn.W_K"], params[p + "attn.W_V"], params[p + "attn.W_O"],
                None, None, None, None, int(cfg.n_heads), int(cfg.n_kv_heads),
            ),
            mlp_norm=Norm("rms", params[p + "norm2.gamma"], None, float(cfg.eps)),
            mlp=GatedMlp(params[p + "ffn.W1"], params[p + "ffn.W3"], params[p + "ffn.W2"], _silu),
            scale=None,
            window=None,
        )

    return Model(
        name=f"{PREFIX}{lang}",
        num_layers=int(cfg.n_layers),
        num_heads=int(cfg.n_heads),
        context=int(cfg.max_len),
        rope=Rope("interleaved", float(cfg.rope_base)),
        tokenize=tokenize,
        embed=embed,
        layer=layer,
        schedule=("full",) * int(cfg.n_layers),  # every layer attends causally over every earlier token, with RoPE
    )

