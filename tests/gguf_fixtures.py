"""Tiny LLaMA / Qwen2 / Qwen3 checkpoints built with transformers' own classes, and GGUF files written from them.

The GGUF side follows llama.cpp's convert_hf_to_gguf.py: its tensor names, its metadata keys, the
LLaMA Q/K row permutation (LlamaModel.permute) and 1-D tensors kept F32. The quantised types the
gguf package can quantize (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, BF16) go through gguf.quants.quantize; the
K-quants (Q4_K, Q5_K, Q6_K), which gguf 0.19 can only dequantize, are packed here by hand from
ggml's block layout (ggml-quants.c), and each packed block is checked against the value the layout
means before gguf's own dequantizer is trusted with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

CORPUS = [
    "Alice was beginning to get very tired of sitting by her sister on the bank,",
    "and of having nothing to do: once or twice she had peeped into the book her sister was reading,",
    "but it had no pictures or conversations in it, and what is the use of a book, thought Alice,",
    "without pictures or conversations? So she was considering in her own mind.",
]
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


# --- tokenizers, and their GGUF metadata --------------------------------------------------


def spm_tokenizer(folder: Path) -> dict[str, Any]:
    """A LLaMA-2-style tokenizer.json (BPE with byte fallback, ▁ for spaces, <s> first) and its GGUF metadata."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trainer_tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=420, show_progress=False))
    trained = sorted(trainer_tok.get_vocab().items(), key=lambda kv: kv[1])
    merges = [tuple(m) for m in json.loads(trainer_tok.to_str())["model"]["merges"]]
    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tokens = specials + byte_tokens + [t for t, _ in trained]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.post_processor = processors.TemplateProcessing(single="<s>:0 $A:0", special_tokens=[("<s>", 1)])
    tok.add_special_tokens(specials)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    types = [2, 3, 3] + [6] * 256 + [1] * len(trained)
    scores = [0.0] * (3 + 256) + [-float(i) for i in range(len(trained))]  # SentencePiece's: later merges score lower
    return {"model": "llama", "tokens": tokens, "types": types, "scores": scores, "merges": [f"{a} {b}" for a, b in merges],
            "bos": 1, "eos": 2, "unk": 0, "add_bos": True}


def bytelevel_tokenizer(folder: Path, pre: str = "qwen2", split: str = QWEN2_SPLIT) -> dict[str, Any]:
    """A Qwen2-style byte-level BPE tokenizer.json (its split regex, no BOS) and its GGUF metadata."""
    import json

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    merges = json.loads(tok.to_str())["model"]["merges"]
    tokens = [t for t, _ in vocab]
    return {"model": "gpt2", "pre": pre, "tokens": tokens, "types": [3 if t == "<|endoftext|>" else 1 for t in tokens],
            "merges": [f"{a} {b}" for a, b in merges], "eos": tokens.index("<|endoftext|>"), "add_bos": False}


LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def llama3_tokenizer(folder: Path) -> dict[str, Any]:
    """A Llama-3-style tokenizer.json (byte-level BPE taking whole words first, <|begin_of_text|> first) and its metadata."""
    import json

    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors, trainers

    split = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.pre_tokenizer = split
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    trainer_tok.train_from_iterator(CORPUS, trainer)
    vocab = trainer_tok.get_vocab()
    merges = [tuple(m) for m in json.loads(trainer_tok.to_str())["model"]["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    tok.pre_tokenizer = split
    tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
    bos = vocab["<|begin_of_text|>"]
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|>:0 $A:0",
                                                       special_tokens=[("<|begin_of_text|>", bos)])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    return {"model": "gpt2", "pre": "llama-bpe", "tokens": tokens, "types": [3 if t.startswith("<|") else 1 for t in tokens],
            "merges": [f"{a} {b}" for a, b in merges], "bos": bos, "eos": vocab["<|end_of_text|>"], "add_bos": True}


# --- checkpoints --------------------------------------------------------------------------


def build_hf(folder: Path, arch: str, vocab: int, *, d: int = 256, heads: int = 4, kv: int = 2, head_dim: int = 64,
             inter: int = 256, layers: int = 3, seed: int = 0) -> Any:
    """A transformers model with random weights (std 0.1: attention far from uniform), saved with save_pretrained."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    common = dict(vocab_size=vocab, hidden_size=d, intermediate_size=inter, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim, max_position_embeddings=64,
                  rms_norm_eps=1e-6, rope_theta=500.0, tie_word_embeddings=False)
    config, cls = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
                   "qwen3": (Qwen3Config, Qwen3ForCausalLM)}[arch]
    torch.manual_seed(seed)
    model = cls(config(**common, attn_implementation="eager"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.1 + (1.0 if name.endswith("norm.weight") else 0.0))
    model.save_pretrained(str(folder))
    return model.double().eval()


def reference(model: Any, ids: list[int], layer: int) -> dict[str, np.ndarray]:
    """transformers' own eager forward, captured by hooks: X entering ``layer``, each head's output (before o_proj)
    and the attention's output after o_proj."""
    import torch

    attn = model.model.layers[layer].self_attn
    seen: dict[str, np.ndarray] = {}
    pre = attn.o_proj.register_forward_pre_hook(lambda _m, args: seen.__setitem__("heads", args[0][0].detach().numpy()))
    post = attn.o_proj.register_forward_hook(lambda _m, _a, out: seen.__setitem__("attn", out[0].detach().numpy()))
    try:
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_hidden_states=True)
    finally:
        pre.remove()
        post.remove()
    d_v = model.config.head_dim
    heads = seen["heads"]  # (n, H·d_v)
    return {"X": out.hidden_states[layer][0].numpy(), "attn": seen["attn"],
            "heads": np.stack([heads[:, h * d_v:(h + 1) * d_v] for h in range(model.config.num_attention_heads)])}


def load_weights(model: Any, stored: dict[str, np.ndarray]) -> None:
    """Put the weights a GGUF holds (dequantized, in the checkpoint's names and order) into the model."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in stored:
                p.copy_(torch.from_numpy(stored[name]).to(p.dtype))


# --- GGUF ---------------------------------------------------------------------------------


def permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """llama.cpp's LlamaModel.permute: each head's rows (i, i + d/2) -> (2i, 2i+1)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
          "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
          "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"}


def gguf_name(hf: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, i, rest = hf.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{i}.{_NAMES[module]}.{kind}"


def write_gguf(path: Path, model: Any, arch: str, tok: dict[str, Any], qtype: str = "F32",
               meta: dict[str, Any] | None = None, skip: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """The model as llama.cpp's converter writes it; returns the weights as stored (dequantized, HF names, HF order)."""
    import gguf

    cfg = model.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_theta if hasattr(cfg, "rope_theta") else cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_tokenizer_model(tok["model"])
    if "pre" in tok:
        w.add_tokenizer_pre(tok["pre"])
    w.add_token_list(tok["tokens"])
    w.add_token_types(tok["types"])
    if "scores" in tok:
        w.add_token_scores(tok["scores"])
    if tok.get("merges") is not None:
        w.add_token_merges(tok["merges"])
    for key in ("bos", "eos", "unk"):
        if key in tok:
            getattr(w, f"add_{key}_token_id")(tok[key])
    w.add_add_bos_token(tok["add_bos"])
    for key, value in (meta or {}).items():
        (w.add_string if isinstance(value, str) else w.add_uint32 if isinstance(value, int) else w.add_float32)(key, value)
    stored: dict[str, np.ndarray] = {}
    for name, p in model.named_parameters():
        value = p.detach().float().numpy()
        target = gguf_name(name)
        if target in skip:
            continue
        if arch == "llama" and ("q_proj" in name or "k_proj" in name):  # convert_hf_to_gguf.py's LlamaModel.modify_tensors
            value = permute(value, cfg.num_attention_heads, None if "q_proj" in name else cfg.num_key_value_heads)
        kept = qtype if value.ndim == 2 else "F32"  # llama.cpp keeps norms and biases F32
        raw, back = encode(value, kept)
        w.add_tensor(target, raw, raw_dtype=getattr(gguf.GGMLQuantizationType, kept))
        if arch == "llama" and ("q_proj" in name or "k_proj" in name):
            back = unpermute(back, cfg.num_attention_heads if "q_proj" in name else cfg.num_key_value_heads)
        stored[name] = back.astype(np.float64)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


def encode(value: np.ndarray, qtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(the bytes, or values, to write; the values a reader must get back)."""
    import gguf

    kind = getattr(gguf.GGMLQuantizationType, qtype)
    if qtype == "F32":
        return value.astype(np.float32), value.astype(np.float32)
    if qtype == "F16":
        half = value.astype(np.float16)
        return half, half.astype(np.float32)
    if qtype in ("Q4_K", "Q5_K", "Q6_K"):
        raw, expected = PACKERS[qtype](value.astype(np.float32))
        got = gguf.quants.dequantize(raw, kind)
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)  # the hand-packed layout is ggml's
        return raw, got
    raw = gguf.quants.quantize(value.astype(np.float32), kind)
    back = gguf.quants.dequantize(raw, kind)
    return raw, back


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16)


def pack_q4_k(x: np.ndarray, levels: int = 15) -> tuple[np.ndarray, np.ndarray]:
    """ggml's block_q4_K (d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles) for rows of x."""
    rows = x.reshape(-1, 8, 32)  # (blocks, sub-block, value)
    lo = np.minimum(rows.min(-1), 0.0)
    scale = (rows.max(-1) - lo) / levels  # (blocks, 8)
    d = _f16(np.maximum(scale.max(-1), 1e-8) / 63)  # (blocks,)
    dmin = _f16(np.maximum((-lo).max(-1), 1e-8) / 63)
    sc = np.clip(np.round(scale / d.astype(np.float32)[:, None]), 1, 63).astype(np.uint8)
    mn = np.clip(np.round(-lo / dmin.astype(np.float32)[:, None]), 0, 63).astype(np.uint8)
    step = d.astype(np.float32)[:, None] * sc  # (blocks, 8)
    offset = dmin.astype(np.float32)[:, None] * mn
    q = np.clip(np.round((rows + offset[..., None]) / step[..., None]), 0, levels).astype(np.uint8)  # (blocks, 8, 32)
    expected = (step[..., None] * q - offset[..., None]).astype(np.float32).reshape(x.shape)
    scales = np.zeros((rows.shape[0], 12), np.uint8)
    for j in range(4):
        scales[:, j] = sc[:, j] | ((sc[:, j + 4] >> 4) << 6)
        scales[:, j + 4] = mn[:, j] | ((mn[:, j + 4] >> 4) << 6)
        scales[:, j + 8] = (sc[:, j + 4] & 0xF) | ((mn[:, j + 4] & 0xF) << 4)
    head = [d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2), scales]
    if levels == 15:
        qs = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(-1, 128)  # sub-blocks 2j (low nibble) and 2j+1 (high)
        body = [qs]
    else:  # Q5_K: the fifth bit of sub-block b is bit b of qh[l]
        low = q & 0xF
        qs = (low[:, 0::2] | (low[:, 1::2] << 4)).reshape(-1, 128)
        qh = np.zeros((rows.shape[0], 32), np.uint8)
        for b in range(8):
            qh |= ((q[:, b] >> 4) & 1) << b
        body = [qh, qs]
    blocks = np.concatenate(head + body, axis=1)
    return blocks.reshape(*x.shape[:-1], -1), expected


def pack_q5_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return pack_q4_k(x, levels=31)


def pack_q6_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's block_q6_K (128 bytes of low nibbles, 64 of high bit pairs, 16 int8 scales, d) for rows of x."""
    rows = x.reshape(-1, 16, 16)  # (blocks, sub-block, value)
    scale = np.abs(rows).max(-1) / 31  # (blocks, 16)
    d = _f16(np.maximum(np.abs(scale).max(-1), 1e-8) / 127)
    sc = np.clip(np.round(scale / d.astype(np.float32)[:, None]), 1, 127).astype(np.int8)
    step = d.astype(np.float32)[:, None] * sc
    q = (np.clip(np.round(rows / step[..., None]), -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # (blocks, half, k, l)
    expected = (step.reshape(-1, 16, 1) * (q.reshape(-1, 16, 16).astype(np.float32) - 32)).reshape(x.shape)
    ql = np.zeros((rows.shape[0], 2, 64), np.uint8)
    qh = np.zeros((rows.shape[0], 2, 32), np.uint8)
    for k in range(4):
        nib = q[:, :, k] & 0xF  # (blocks, half, 32)
        where = slice(32 * (k % 2), 32 * (k % 2) + 32)
        ql[:, :, where] |= nib << (4 * (k // 2))
        qh |= ((q[:, :, k] >> 4) & 3) << (2 * k)
    blocks = np.concatenate([ql.reshape(-1, 128), qh.reshape(-1, 64), sc.view(np.uint8), d.view(np.uint8).reshape(-1, 2)], axis=1)
    return blocks.reshape(*x.shape[:-1], -1), expected.astype(np.float32)


PACKERS = {"Q4_K": pack_q4_k, "Q5_K": pack_q5_k, "Q6_K": pack_q6_k}
