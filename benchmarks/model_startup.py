"""A real model's head at SmolLM2-135M's size against the built-in scenario: time to the first screen.

Run ``python benchmarks/model_startup.py`` (``--repeats N``, ``--json``). It writes a Hugging Face folder
shaped like SmolLM2-135M (llama, 30 layers, d_model 576, 9 query heads on 3 K/V heads, head_dim 64, MLP
1,536, vocabulary 49,152, bf16 weights; random numbers, since only the sizes cost time) once into a
temporary folder, then starts the app headless on a 32-token text at layer 0 and at the last layer (29
earlier layers run in NumPy first) and on I love AI, alternately, leaving at the first complete frame.
The target: the model's head within 2× the built-in's time, as medians of the same session.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import start_once

TARGET = 2.0
SIZES = {"layers": 30, "d_model": 576, "heads": 9, "kv_heads": 3, "head_dim": 64, "inter": 1536, "vocab": 49152}
WORDS = ["the", "cat", "sat", "on", "a", "mat", "while", "a", "dog", "ran", "past", "the", "old", "tree",
         "and", "a", "bird", "sang", "over", "the", "quiet", "river", "bank", "as", "the", "sun", "went",
         "down", "behind", "the", "hill"]
TEXT = " ".join(WORDS[:32])


def _tokenizer(path: Path) -> None:
    """A word-level tokenizer over the text's words: 32 words give 32 tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0} | {w: i + 1 for i, w in enumerate(dict.fromkeys(WORDS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path))


def _bf16(a: np.ndarray) -> np.ndarray:
    """float32 → the upper 16 bits (bf16, truncated: the numbers are random anyway)."""
    return np.ascontiguousarray((a.astype(np.float32).view(np.uint32) >> 16).astype("<u2"))


def write_model(folder: Path) -> None:
    from safetensors import TensorSpec, serialize_file

    s = SIZES
    d, q, kv, inter = s["d_model"], s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"], s["inter"]
    config = {"model_type": "llama", "hidden_size": d, "num_attention_heads": s["heads"],
              "num_key_value_heads": s["kv_heads"], "head_dim": s["head_dim"], "num_hidden_layers": s["layers"],
              "intermediate_size": inter, "rms_norm_eps": 1e-5, "max_position_embeddings": 8192,
              "rope_theta": 100000.0, "hidden_act": "silu", "vocab_size": s["vocab"], "rope_scaling": None,
              "tie_word_embeddings": True}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    _tokenizer(folder / "tokenizer.json")
    rng = np.random.default_rng(0)
    shapes = {"model.embed_tokens.weight": (s["vocab"], d), "model.norm.weight": (d,)}
    for i in range(s["layers"]):
        h = f"model.layers.{i}."
        shapes |= {h + "input_layernorm.weight": (d,), h + "post_attention_layernorm.weight": (d,),
                   h + "self_attn.q_proj.weight": (q, d), h + "self_attn.k_proj.weight": (kv, d),
                   h + "self_attn.v_proj.weight": (kv, d), h + "self_attn.o_proj.weight": (d, q),
                   h + "mlp.gate_proj.weight": (inter, d), h + "mlp.up_proj.weight": (inter, d),
                   h + "mlp.down_proj.weight": (d, inter)}
    buffers = {name: _bf16(rng.normal(0.0, 0.05, shape) + (1.0 if len(shape) == 1 else 0.0))
               for name, shape in shapes.items()}
    specs = {name: TensorSpec(dtype="bfloat16", shape=list(shapes[name]), data_ptr=b.ctypes.data, data_len=b.nbytes)
             for name, b in buffers.items()}
    serialize_file(specs, str(folder / "model.safetensors"), metadata={"format": "pt"})


def scenario(folder: Path, layer: int) -> str:
    path = folder.parent / f"smollm2_layer{layer}.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nlayer = {layer}\nheads = [0]\n')
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "smollm2-135m-shaped"
        write_model(folder)
        programs = {"builtin": "i_love_ai", "layer 0": scenario(folder, 0),
                    f"layer {SIZES['layers'] - 1}": scenario(folder, SIZES["layers"] - 1)}
        runs: dict[str, list[float]] = {name: [] for name in programs}
        for _ in range(args.repeats):
            for name, sc in programs.items():
                runs[name].append(start_once("qkv", sc)[0])
    med = {name: float(statistics.median(times)) for name, times in runs.items()}
    result = {"repeats": args.repeats, "median_s": med, "target": TARGET,
              "vs_builtin": {name: med[name] / med["builtin"] for name in med if name != "builtin"}, "runs": runs}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"first screen, median of {args.repeats} alternated start-ups (SmolLM2-135M's shape, 32 tokens):")
    for name in programs:
        ratio = "" if name == "builtin" else f"  {result['vs_builtin'][name]:.2f}× the built-in (target ≤ {TARGET}×)"
        print(f"  {name:<9} {med[name]:.3f} s{ratio}")


if __name__ == "__main__":
    main()
