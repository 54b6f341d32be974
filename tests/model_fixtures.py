"""Tiny Hugging Face checkpoints built for the tests, and forward passes written independently of qkv_tui.

The checkpoints have random weights but the real key names, shapes and orientations (GPT-2's
Conv1D (in, out) with a fused c_attn; LLaMA's nn.Linear (out, in)); they are written with the
safetensors library (bf16 through its raw TensorSpec API, since NumPy has no bfloat16) and come
with a tokenizer.json trained by the tokenizers library. The reference passes follow the
transformers code path (split/merge heads with reshapes, rotate_half, repeat_kv, additive
masks), not the importer's, so an error in either shows up as a mismatch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

CORPUS = [
    "Alice was beginning to get very tired of sitting by her sister on the bank,",
    "and of having nothing to do: once or twice she had peeped into the book her sister was reading,",
    "but it had no pictures or conversations in it, and what is the use of a book, thought Alice,",
    "without pictures or conversations? So she was considering in her own mind.",
]


def bf16_round(values: np.ndarray) -> np.ndarray:
    """float32 -> the nearest bfloat16 (round half to even), returned as float32."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return rounded.astype(np.uint32).view(np.float32)


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """Write float32 tensors as F32, F16 or BF16; return the values as stored (what a reader must get back)."""
    from safetensors import TensorSpec, serialize_file
    from safetensors.numpy import save_file

    stored: dict[str, np.ndarray] = {}
    if dtype in ("F32", "F16"):
        np_dtype = np.float32 if dtype == "F32" else np.float16
        arrays = {k: np.ascontiguousarray(v.astype(np_dtype)) for k, v in tensors.items()}
        save_file(arrays, str(path), metadata={"format": "pt"})
        return {k: v.astype(np.float64) for k, v in arrays.items()}
    buffers = {}
    specs = {}
    for name, value in tensors.items():
        rounded = bf16_round(value)
        stored[name] = rounded.astype(np.float64)
        halves = np.ascontiguousarray((rounded.view(np.uint32) >> 16).astype("<u2"))
        buffers[name] = halves
        specs[name] = TensorSpec(dtype="bfloat16", shape=list(value.shape), data_ptr=halves.ctypes.data, data_len=halves.nbytes)
    serialize_file(specs, str(path), metadata={"format": "pt"})
    return stored


def gpt2_tokenizer(path: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.save(str(path))
    return int(tok.get_vocab_size())


def llama_tokenizer(path: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.save(str(path))
    return int(tok.get_vocab_size())


def build_gpt2(folder: Path, *, dtype: str = "F32", prefix: str = "transformer.", seed: int = 0,
               config: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """A 3-layer GPT-2 (d 16, 4 heads, 12 positions); returns the stored weights by key."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = gpt2_tokenizer(folder / "tokenizer.json")
    rng = np.random.default_rng(seed)
    d, layers, positions = 16, 3, 24
    cfg = {"model_type": "gpt2", "n_embd": d, "n_head": 4, "n_layer": layers, "n_positions": positions,
           "vocab_size": vocab, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
           "architectures": ["GPT2LMHeadModel"]} | (config or {})
    (folder / "config.json").write_text(json.dumps(cfg))
    w = lambda *shape: rng.normal(0.0, 0.5, shape).astype(np.float32)
    t: dict[str, np.ndarray] = {"wte.weight": w(vocab, d), "wpe.weight": w(positions, d), "ln_f.weight": w(d), "ln_f.bias": w(d)}
    for i in range(layers):
        h = f"h.{i}."
        t |= {h + "ln_1.weight": 1 + w(d), h + "ln_1.bias": w(d), h + "attn.c_attn.weight": w(d, 3 * d),
              h + "attn.c_attn.bias": w(3 * d), h + "attn.c_proj.weight": w(d, d), h + "attn.c_proj.bias": w(d),
              h + "ln_2.weight": 1 + w(d), h + "ln_2.bias": w(d), h + "mlp.c_fc.weight": w(d, 4 * d),
              h + "mlp.c_fc.bias": w(4 * d), h + "mlp.c_proj.weight": w(4 * d, d), h + "mlp.c_proj.bias": w(d),
              # the causal-mask buffers older checkpoints carry: not biases
              h + "attn.bias": np.tril(np.ones((positions, positions), np.float32)),
              h + "attn.masked_bias": np.array(-1e4, np.float32)}
    stored = write_safetensors(folder / "model.safetensors", {prefix + k: v for k, v in t.items()}, dtype)
    return {k[len(prefix):]: v for k, v in stored.items()}


def build_llama(folder: Path, *, model_type: str = "llama", dtype: str = "F32", seed: int = 0, biases: bool = False,
                config: dict[str, Any] | None = None, head_dim: int = 6) -> dict[str, np.ndarray]:
    """A 3-layer LLaMA-family model (d 16, 4 query heads on 2 K/V heads, head_dim 6); returns the stored weights."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = llama_tokenizer(folder / "tokenizer.json")
    rng = np.random.default_rng(seed)
    d, layers, heads, kv, inter = 16, 3, 4, 2, 24
    cfg = {"model_type": model_type, "hidden_size": d, "num_attention_heads": heads, "num_key_value_heads": kv,
           "head_dim": head_dim, "num_hidden_layers": layers, "intermediate_size": inter, "rms_norm_eps": 1e-6,
           "max_position_embeddings": 32, "rope_theta": 500.0, "hidden_act": "silu", "vocab_size": vocab,
           "rope_scaling": None, "tie_word_embeddings": False} | (config or {})
    (folder / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not ...}))
    w = lambda *shape: rng.normal(0.0, 0.5, shape).astype(np.float32)
    t: dict[str, np.ndarray] = {"model.embed_tokens.weight": w(vocab, d), "model.norm.weight": 1 + w(d),
                                "lm_head.weight": w(vocab, d)}
    for i in range(layers):
        h = f"model.layers.{i}."
        t |= {h + "input_layernorm.weight": 1 + w(d), h + "post_attention_layernorm.weight": 1 + w(d),
              h + "self_attn.q_proj.weight": w(heads * head_dim, d), h + "self_attn.k_proj.weight": w(kv * head_dim, d),
              h + "self_attn.v_proj.weight": w(kv * head_dim, d), h + "self_attn.o_proj.weight": w(d, heads * head_dim),
              h + "mlp.gate_proj.weight": w(inter, d), h + "mlp.up_proj.weight": w(inter, d),
              h + "mlp.down_proj.weight": w(d, inter)}
        if biases:
            t |= {h + "self_attn.q_proj.bias": w(heads * head_dim), h + "self_attn.k_proj.bias": w(kv * head_dim),
                  h + "self_attn.v_proj.bias": w(kv * head_dim)}
    return write_safetensors(folder / "model.safetensors", t, dtype)


# --- independent forward passes (transformers' code path, in NumPy) ----------------------


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def gpt2_reference(t: dict[str, np.ndarray], cfg: dict[str, Any], ids: list[int], layer: int) -> dict[str, Any]:
    """X entering ``layer``, each head's output there, and the attention sub-layer's output."""
    d, H = cfg["n_embd"], cfg["n_head"]
    hd, n = d // H, len(ids)
    x = t["wte.weight"][ids] + t["wpe.weight"][np.arange(n)]
    causal = np.tril(np.ones((n, n), bool))
    for i in range(layer + 1):
        h = f"h.{i}."
        a = _layer_norm(x, t[h + "ln_1.weight"], t[h + "ln_1.bias"], cfg.get("layer_norm_epsilon", 1e-5))
        qkv = a @ t[h + "attn.c_attn.weight"] + t[h + "attn.c_attn.bias"]
        q, k, v = (m.reshape(n, H, hd).transpose(1, 0, 2) for m in np.split(qkv, 3, axis=1))  # (H, n, hd)
        w = q @ k.transpose(0, 2, 1)
        if cfg.get("scale_attn_weights", True):
            w = w / math.sqrt(hd)
        if cfg.get("scale_attn_by_inverse_layer_idx", False):
            w = w / float(i + 1)
        w = np.where(causal, w, np.finfo(np.float64).min)
        heads = _softmax(w) @ v  # (H, n, hd)
        merged = heads.transpose(1, 0, 2).reshape(n, d)
        attn = merged @ t[h + "attn.c_proj.weight"] + t[h + "attn.c_proj.bias"]
        if i == layer:
            return {"X": x, "heads": list(heads), "attn": attn}
        x = x + attn
        m = _layer_norm(x, t[h + "ln_2.weight"], t[h + "ln_2.bias"], cfg.get("layer_norm_epsilon", 1e-5))
        f = m @ t[h + "mlp.c_fc.weight"] + t[h + "mlp.c_fc.bias"]
        f = 0.5 * f * (1 + np.tanh(math.sqrt(2 / math.pi) * (f + 0.044715 * f**3)))
        x = x + f @ t[h + "mlp.c_proj.weight"] + t[h + "mlp.c_proj.bias"]
    raise AssertionError("unreachable")


def _rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def llama_reference(t: dict[str, np.ndarray], cfg: dict[str, Any], ids: list[int], layer: int,
                    windows: list[int | None] | None = None) -> dict[str, Any]:
    """``windows``: each layer's sliding window (None = plain causal), as the config makes them."""
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    n, eps = len(ids), cfg["rms_norm_eps"]
    theta = cfg.get("rope_theta") or cfg["rope_parameters"]["rope_theta"]
    inv_freq = 1.0 / (theta ** (np.arange(0, hd, 2) / hd))
    freqs = np.outer(np.arange(n), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)
    rms = lambda x, w: x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w
    i_, j_ = np.arange(n)[:, None], np.arange(n)[None, :]
    x = t["model.embed_tokens.weight"][ids]
    for i in range(layer + 1):
        window = windows[i] if windows else None
        mask = np.where((j_ <= i_) & ((i_ - j_ < window) if window else True), 0.0, -np.inf)
        h = f"model.layers.{i}."
        a = rms(x, t[h + "input_layernorm.weight"])
        q, k, v = (
            (a @ t[h + f"self_attn.{role}_proj.weight"].T + t.get(h + f"self_attn.{role}_proj.bias", 0.0))
            .reshape(n, heads, hd).transpose(1, 0, 2)  # (heads, n, hd)
            for role, heads in (("q", H), ("k", KV), ("v", KV))
        )
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        k, v = np.repeat(k, H // KV, axis=0), np.repeat(v, H // KV, axis=0)  # repeat_kv
        heads = _softmax(q @ k.transpose(0, 2, 1) * hd**-0.5 + mask) @ v  # (H, n, hd)
        attn = heads.transpose(1, 0, 2).reshape(n, H * hd) @ t[h + "self_attn.o_proj.weight"].T
        if i == layer:
            return {"X": x, "heads": list(heads), "attn": attn}
        x = x + attn
        m = rms(x, t[h + "post_attention_layernorm.weight"])
        g = m @ t[h + "mlp.gate_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * (m @ t[h + "mlp.up_proj.weight"].T)) @ t[h + "mlp.down_proj.weight"].T
    raise AssertionError("unreachable")


# --- the scenario dict, evaluated by the letter of docs/scenario-format.md ----------------------------


def evaluate_scenario_dict(doc: dict[str, Any]) -> dict[str, Any]:
    """Per-head outputs and the final output of a plain scenario dict, with loops where the formulas have sums.

    Covers what the importers emit: [norm], [rope], [attention] with num_kv_heads or [[heads]]
    with kv_head, biases, [output] with b_O, scale, mask "causal" or sliding.
    """
    X = np.array(doc["X"], dtype=np.float64)
    n, d = X.shape
    if "norm" in doc:
        norm = doc["norm"]
        gamma = np.array(norm.get("gamma", [1.0] * d))
        rows = []
        for r in range(n):
            row = X[r]
            if norm["kind"] == "rms":
                ms = sum(v * v for v in row) / d
                rows.append([row[c] / math.sqrt(ms + norm.get("eps", 1e-5)) * gamma[c] for c in range(d)])
            else:
                mu = sum(row) / d
                var = sum((v - mu) ** 2 for v in row) / d
                beta = norm.get("beta", [0.0] * d)
                rows.append([(row[c] - mu) / math.sqrt(var + norm.get("eps", 1e-5)) * gamma[c] + beta[c] for c in range(d)])
        X = np.array(rows)
    heads: list[dict[str, Any]] = []
    if "attention" in doc:
        att = doc["attention"]
        H, KV = att["num_heads"], att.get("num_kv_heads", att["num_heads"])
        WQ, WK, WV = (np.array(att[r]) for r in ("W_Q", "W_K", "W_V"))
        dk, dv = WQ.shape[1] // H, WV.shape[1] // KV
        for h in range(H):
            g = h * KV // H
            part = lambda M, b, w, c: (M[:, c * w:(c + 1) * w], None if b is None else np.array(b)[c * w:(c + 1) * w])
            heads.append({"Q": part(WQ, att.get("b_Q"), dk, h), "K": part(WK, att.get("b_K"), dk, g),
                          "V": part(WV, att.get("b_V"), dv, g)})
    else:
        for table in doc["heads"]:
            heads.append({r: (np.array(table[f"W_{r}"]), np.array(table[f"b_{r}"]) if f"b_{r}" in table else None)
                          for r in "QKV"})
    mask = doc.get("mask", "none")
    window = mask["window"] if isinstance(mask, dict) else None
    outputs = []
    for head in heads:
        proj = {}
        for role, (W, b) in head.items():
            M = np.array([[sum(X[r, c] * W[c, k] for c in range(d)) + (0.0 if b is None else b[k])
                           for k in range(W.shape[1])] for r in range(n)])
            if role in "QK" and "rope" in doc:
                rope = doc["rope"]
                width = M.shape[1]
                for r in range(n):
                    p = rope["positions"][r]
                    out = M[r].copy()
                    for i in range(width // 2):
                        a_i, b_i = (2 * i, 2 * i + 1) if rope["layout"] == "interleaved" else (i, i + width // 2)
                        angle = p * rope["base"] ** (-2 * i / width)
                        out[a_i] = M[r, a_i] * math.cos(angle) - M[r, b_i] * math.sin(angle)
                        out[b_i] = M[r, a_i] * math.sin(angle) + M[r, b_i] * math.cos(angle)
                    M[r] = out
            proj[role] = M
        Q, K, V = proj["Q"], proj["K"], proj["V"]
        scale = doc.get("scale", math.sqrt(Q.shape[1]))
        out_rows = []
        for i in range(n):
            keys = [j for j in range(n) if (mask == "none") or (j <= i and (window is None or i - j < window))]
            s = {j: sum(Q[i, c] * K[j, c] for c in range(Q.shape[1])) / scale for j in keys}
            top = max(s.values())
            e = {j: math.exp(v - top) for j, v in s.items()}
            total = sum(e.values())
            out_rows.append([sum(e[j] / total * V[j, c] for j in keys) for c in range(V.shape[1])])
        outputs.append(np.array(out_rows))
    concat = np.concatenate(outputs, axis=1)
    final = concat
    if "output" in doc:
        final = concat @ np.array(doc["output"]["W_O"]) + np.array(doc["output"].get("b_O", 0.0))
    return {"heads": outputs, "output": final}


def one_error(cli: Callable[..., Any], tmp_path: Path, source: str, needle: str) -> str:
    """A [model] file naming ``source`` fails --check with one line (exit 2, nothing on stdout) that names ``needle``."""
    path = tmp_path / "head.toml"
    path.write_text(f'[model]\nsource = "{source}"\ntext = "Alice was reading"\n', encoding="utf-8")
    run = cli("--check", str(path))
    assert run.code == 2 and run.out == "", run.err[:400]
    assert run.err.startswith(f"error: {path}: ") and run.err.count("\n") == 1 and "Traceback" not in run.err, run.err[:400]
    assert needle in run.err, run.err
    return str(run.err)
