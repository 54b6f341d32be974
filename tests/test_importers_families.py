"""The 2026 Hugging Face families against transformers' own eager forward (the reference; the package never imports it).

Each case builds a tiny random checkpoint with transformers' own config and model classes, saves it
with ``save_pretrained``, opens it through a scenario's [model] table, and compares what the app
computes with what forward hooks capture inside the model's own float64 eager forward: the layer's
input X, every head's W_Q/W_K/W_V columns, every head's output (the input of o_proj, head by head)
and the attention output after W_O, at layer 0 and at later layers (which checks the residual stream).
Qwen3, OLMo 2, gpt-oss, Gemma 2 and 3 and partial or scaled RoPE are read as transformers runs them; the
types the importer cannot read yet (hf_pending.py) are one line naming the missing feature.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.layer_schedule import schedule_line
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.kernels.sinks import Sunk
from qkv_tui.kernels.softcap import Capped
from qkv_tui.teach.stepper import Position

from .conftest import BASE, HEAD
from .hooked_forward import catch_o_proj, forward_hooked
from .model_fixtures import llama_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXT = "Alice was reading the book of her sister"
EXACT = 1e-9  # float64 throughout (BERT: learned positions)
# transformers computes RoPE's cos and sin in float32 whatever the model's dtype (its rotary embedding
# casts inv_freq and the positions with .float()), so every rotated layer agrees to float32 only
ROPE_FLOAT32 = 2e-5


def _randomise(model: Any, seed: int) -> None:
    """transformers' own init (std 0.02) leaves attention nearly uniform: wider weights make every head tell."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.4
            p.copy_(1.0 + 0.2 * noise if name.endswith(("norm.weight", "LayerNorm.weight")) else noise)


def _build(folder: Path, cls_name: str, config: Any, seed: int = 0, **how: Any) -> Any:
    cls = getattr(transformers, cls_name)
    model = cls._from_config(config, attn_implementation="eager", **how)
    _randomise(model, seed)
    transformers.utils.logging.disable_progress_bar()  # its bar on stderr would be read as the CLI's output
    model.save_pretrained(folder)  # float32 safetensors, the key names the Hub's checkpoints carry
    return model.double().eval()


def _ids(doc_description: str) -> list[int]:
    return [int(i) for i in doc_description.rsplit("ids ", 1)[1].split(".")[0].split()]


def _reference(model: Any, layers: Any, ids: list[int], layer: int, attention: Callable[[Any], Any],
               o_proj: Callable[[Any], Any]) -> dict[str, np.ndarray]:
    """X entering ``layer``, the merged head outputs entering W_O, and W_O's output, from hooks in the eager forward."""
    seen: dict[str, np.ndarray] = {}
    block = layers[layer]

    def before_block(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        hidden = args[0] if args else kwargs["hidden_states"]
        seen["X"] = hidden[0].detach().numpy().copy()

    forward_hooked(model, ids, [block.register_forward_pre_hook(before_block, with_kwargs=True),
                                *catch_o_proj(o_proj(block), seen)])
    return seen


def _open(tmp_path: Path, folder: Path, layer: int, extra: str = "") -> Any:
    """Layer ``layer`` of the folder opened through a [model] table (``extra``: more of its lines) and computed."""
    path = tmp_path / f"layer{layer}.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nlayer = {layer}\n{extra}', encoding="utf-8")
    return compute(parse_scenario(path.read_text(encoding="utf-8"), str(path)))


def _decoder_reference(model: Any, comp: Any, layer: int) -> dict[str, np.ndarray]:
    """_reference for a decoder (model.model.layers, each block's self_attn and o_proj) on the scenario's tokens."""
    return _reference(model, model.model.layers, _ids(comp.scenario.description), layer,
                      lambda b: b.self_attn, lambda b: b.self_attn.o_proj)


def _opened(tmp_path: Path, folder: Path, model: Any, layer: int) -> tuple[Any, dict[str, np.ndarray]]:
    """A decoder's layer opened through a [model] file beside its tokenizer, and transformers' numbers for it."""
    _place_tokenizer(tmp_path, folder)
    comp = _open(tmp_path, folder, layer)
    return comp, _decoder_reference(model, comp, layer)


def _check(comp: Any, ref: dict[str, np.ndarray], q: np.ndarray, k: np.ndarray, v: np.ndarray, kv_heads: int,
           tol: float = ROPE_FLOAT32) -> None:
    """``q``, ``k``, ``v``: the model's own projection weights in the x·W orientation (d_model, width)."""
    sc = comp.scenario
    np.testing.assert_allclose(sc.X, ref["X"], rtol=tol, atol=tol)
    heads = len(comp.heads)
    d_k, d_v = comp.heads[0].d_k, comp.heads[0].d_v
    for h, head in enumerate(comp.heads):
        g = h // (heads // kv_heads)
        assert head.kv_head == g
        np.testing.assert_array_equal(head.W_Q, q[:, h * d_k:(h + 1) * d_k])
        np.testing.assert_array_equal(head.W_K, k[:, g * d_k:(g + 1) * d_k])
        np.testing.assert_array_equal(head.W_V, v[:, g * d_v:(g + 1) * d_v])
        np.testing.assert_allclose(head.output, ref["merged"][:, h * d_v:(h + 1) * d_v], rtol=tol, atol=tol)
    np.testing.assert_allclose(comp.output, ref["attn"], rtol=tol, atol=tol)


def _linear(weight: Any) -> np.ndarray:
    return weight.detach().numpy().T.astype(np.float64)  # nn.Linear is (out, in)


def _llama_like(model: Any, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    att = model.model.layers[layer].self_attn
    return _linear(att.q_proj.weight), _linear(att.k_proj.weight), _linear(att.v_proj.weight)


def _decoder_config(cls_name: str, vocab: int, **extra: Any) -> Any:
    base = dict(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                tie_word_embeddings=False)
    return getattr(transformers, cls_name)(**(base | extra))


def _with_tokenizer(tmp_path: Path, name: str) -> tuple[Path, int]:
    """The folder to build into (not yet made: save_pretrained makes it) and the tokenizer's vocabulary size."""
    vocab = llama_tokenizer(tmp_path / f"{name}-tokenizer.json")
    return tmp_path / name, vocab


def _place_tokenizer(tmp_path: Path, folder: Path) -> None:
    (tmp_path / f"{folder.name}-tokenizer.json").rename(folder / "tokenizer.json")


@pytest.mark.parametrize("layer", [0, 1, 3])
def test_smollm3_nope_layers_and_grouped_heads(tmp_path: Path, layer: int) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "smollm3")
    config = _decoder_config("SmolLM3Config", vocab, no_rope_layer_interval=2)  # NoPE at layers 1 and 3
    model = _build(folder, "SmolLM3ForCausalLM", config)
    _place_tokenizer(tmp_path, folder)
    saved = json.loads((folder / "config.json").read_text())
    assert saved["no_rope_layers"] == [1, 0, 1, 0]
    comp = _open(tmp_path, folder, layer)
    ref = _decoder_reference(model, comp, layer)
    _check(comp, ref, *_llama_like(model, layer), kv_heads=2)
    assert (comp.scenario.rope is None) == (layer in (1, 3))
    assert comp.scenario.input.schedule == ("full", "full no-rope", "full", "full no-rope")
    marked = {0: "[0 F]", 1: "[1 N]", 3: "[3 N]"}[layer]
    assert marked in comp.scenario.input.schedule_text and "N no RoPE" in comp.scenario.input.schedule_text


@pytest.mark.parametrize("layer", [0, 2])
def test_granite_multipliers_and_biases(tmp_path: Path, layer: int) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "granite")
    config = _decoder_config("GraniteConfig", vocab, embedding_multiplier=3.0, attention_multiplier=0.3,
                             residual_multiplier=0.5, logits_scaling=4.0, attention_bias=True, num_hidden_layers=3)
    model = _build(folder, "GraniteForCausalLM", config, seed=1)
    comp, ref = _opened(tmp_path, folder, model, layer)
    _check(comp, ref, *_llama_like(model, layer), kv_heads=2)
    assert comp.heads[0].scale == pytest.approx(1 / 0.3) and not comp.heads[0].scale_is_default
    assert comp.heads[0].b_Q is not None and comp.b_O is not None
    assert "multiplied by 3" in comp.scenario.description


@pytest.mark.parametrize("layer", [0, 2])
def test_phi3_fused_projections_and_sliding_window(tmp_path: Path, layer: int) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "phi3")
    config = _decoder_config("Phi3Config", vocab, num_hidden_layers=3, sliding_window=4)
    model = _build(folder, "Phi3ForCausalLM", config, seed=2)
    comp, ref = _opened(tmp_path, folder, model, layer)
    fused = _linear(model.model.layers[layer].self_attn.qkv_proj.weight)  # (d, q + k + v)
    q_width, kv_width = 4 * 8, 2 * 8
    _check(comp, ref, fused[:, :q_width], fused[:, q_width:q_width + kv_width], fused[:, q_width + kv_width:], kv_heads=2)
    assert comp.scenario.mask_kind == "sliding" and comp.scenario.window == 4
    assert comp.scenario.input.schedule_text == {0: "layers: [0 S] · 1–2 S (S sliding 4)",
                                                 2: "layers: 0–1 S · [2 S] (S sliding 4)"}[layer]


@pytest.mark.parametrize("layer", [0, 3])
def test_qwen3_qk_norm_per_head_and_head_dim_from_the_config(tmp_path: Path, layer: int) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "qwen3")
    config = _decoder_config("Qwen3Config", vocab, head_dim=12, attention_bias=True, use_sliding_window=True,
                             sliding_window=4, max_window_layers=2)  # layers 2 and 3 slide
    model = _build(folder, "Qwen3ForCausalLM", config, seed=5)
    comp, ref = _opened(tmp_path, folder, model, layer)
    _check(comp, ref, *_llama_like(model, layer), kv_heads=2)
    sc, att = comp.scenario, model.model.layers[layer].self_attn
    assert sc.qk_norm is not None and sc.qk_norm.over == "head" and comp.heads[0].d_k == 12
    np.testing.assert_array_equal(sc.qk_norm.gamma_q, att.q_norm.weight.detach().numpy())
    np.testing.assert_array_equal(sc.qk_norm.gamma_k, att.k_norm.weight.detach().numpy())
    assert sc.qk_norm.eps == config.rms_norm_eps
    assert sc.input.schedule == ("full", "full", "sliding 4", "sliding 4")
    assert (sc.mask_kind == "sliding") == (layer == 3)


def test_qwen3_chosen_heads_keep_their_qk_norm(tmp_path: Path) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "qwen3")
    model = _build(folder, "Qwen3ForCausalLM", _decoder_config("Qwen3Config", vocab, num_hidden_layers=2), seed=6)
    _place_tokenizer(tmp_path, folder)
    path = tmp_path / "heads.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nlayer = 1\nheads = [3, 0]\n', encoding="utf-8")
    comp = compute(parse_scenario(path.read_text(encoding="utf-8"), str(path)))
    ref = _decoder_reference(model, comp, 1)
    d = comp.heads[0].d_v  # Qwen3Config's own head_dim (128), not hidden_size / heads
    assert d == model.config.head_dim == 128 and comp.scenario.qk_norm is not None
    for head, h in zip(comp.heads, (3, 0), strict=True):
        np.testing.assert_allclose(head.output, ref["merged"][:, h * d:(h + 1) * d], rtol=ROPE_FLOAT32, atol=ROPE_FLOAT32)


@pytest.mark.parametrize("layer", [0, 2])
def test_olmo2_qk_norm_over_the_whole_projection_and_norms_after_the_sub_layers(tmp_path: Path, layer: int) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "olmo2")
    config = _decoder_config("Olmo2Config", vocab, num_hidden_layers=3, attention_bias=True)
    model = _build(folder, "Olmo2ForCausalLM", config, seed=7)
    comp, ref = _opened(tmp_path, folder, model, layer)
    _check(comp, ref, *_llama_like(model, layer), kv_heads=2)
    sc, att = comp.scenario, model.model.layers[layer].self_attn
    assert sc.qk_norm is not None and sc.qk_norm.over == "all"
    np.testing.assert_array_equal(sc.qk_norm.gamma_q, att.q_norm.weight.detach().numpy())  # (H·d_k,)
    np.testing.assert_array_equal(sc.qk_norm.gamma_k, att.k_norm.weight.detach().numpy())  # (H_kv·d_k,)
    assert sc.norm is None and "no Norm stage" in sc.description


def test_olmo2_chosen_heads_are_one_line(cli: Any, tmp_path: Path) -> None:
    """Refused rather than emitting every head: a head's QK-norm needs the other heads' columns ([[heads]] cannot)."""
    folder, vocab = _with_tokenizer(tmp_path, "olmo2")
    _build(folder, "Olmo2ForCausalLM", _decoder_config("Olmo2Config", vocab, num_hidden_layers=2))
    _place_tokenizer(tmp_path, folder)
    path = tmp_path / "heads.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nheads = [1]\n', encoding="utf-8")
    run = cli("--check", str(path))
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1, run.err
    assert '[qk_norm] over = "all"), so the scenario needs every head; leave out model.heads' in run.err, run.err


ROPE_CASES = [
    # (family, rope_parameters as transformers 5 writes them, what the scenario's [rope] gets beside layout and base)
    ("Phi3", {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75}, {"partial": 0.75}),
    ("Mistral", {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 4,
                 "truncate": False},
     {"scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4.0, "truncate": False}}),
    ("Llama", {"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0}, {"scaling": {"type": "linear", "factor": 2.0}}),
    ("Llama", {"rope_type": "llama3", "rope_theta": 500.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16},
     {"scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 16.0}}),
    ("Qwen2", {"rope_type": "yarn", "rope_theta": 1000.0, "factor": 4.0, "original_max_position_embeddings": 4,
               "beta_fast": 8.0, "beta_slow": 2.0, "attention_factor": 1.3},
     {"scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4.0, "beta_fast": 8.0,
                  "beta_slow": 2.0, "attention_factor": 1.3}}),
]


@pytest.mark.parametrize("form", ["transformers5", "transformers4"])
@pytest.mark.parametrize(("family", "params", "rope"), ROPE_CASES,
                         ids=[f"{f}-{p['rope_type']}-{p.get('partial_rotary_factor', 1)}" for f, p, _ in ROPE_CASES])
def test_partial_rotary_and_rope_scaling_pass_straight_through(tmp_path: Path, family: str, params: dict[str, Any],
                                                               rope: dict[str, Any], form: str) -> None:
    folder, vocab = _with_tokenizer(tmp_path, family.lower())
    config = _decoder_config(f"{family}Config", vocab, num_hidden_layers=3, rope_parameters=dict(params))
    model = _build(folder, f"{family}ForCausalLM", config, seed=8)
    _place_tokenizer(tmp_path, folder)
    if form == "transformers4":  # the same fields as top-level rope_theta, partial_rotary_factor and rope_scaling
        data = json.loads((folder / "config.json").read_text())
        table = dict(data.pop("rope_parameters"))
        data["rope_theta"] = table.pop("rope_theta")
        if "partial_rotary_factor" in table:
            data["partial_rotary_factor"] = table.pop("partial_rotary_factor")
        data["rope_scaling"] = None if table["rope_type"] == "default" else table
        (folder / "config.json").write_text(json.dumps(data))
    # transformers works the scaled frequencies out in float32 as well: a looser bound than plain RoPE's, and the
    # frequencies themselves compared with its own rotary buffer to float32's precision
    tol = ROPE_FLOAT32 if "scaling" not in rope else 1e-4
    for layer in (0, 2):
        comp = _open(tmp_path, folder, layer)
        ref = _decoder_reference(model, comp, layer)
        att = model.model.layers[layer].self_attn
        if family == "Phi3":
            fused = _linear(att.qkv_proj.weight)  # (d, q + k + v)
            _check(comp, ref, fused[:, :32], fused[:, 32:48], fused[:, 48:], kv_heads=2, tol=tol)
        else:
            _check(comp, ref, *_llama_like(model, layer), kv_heads=2, tol=tol)
    table = comp.scenario.rope
    assert table is not None
    np.testing.assert_allclose(table.inv_freq(8), model.model.rotary_emb.inv_freq.numpy(), rtol=3e-7)
    assert table.attention_factor == pytest.approx(model.model.rotary_emb.attention_scaling)
    table = parse_scenario(to_toml(comp.scenario), "frozen.toml").rope
    assert table is not None and table.base == params["rope_theta"]
    assert table.partial == rope.get("partial", 1.0)
    if "scaling" in rope:
        assert table.scaling is not None and table.scaling.type == rope["scaling"]["type"]
        assert table.scaling.factor == rope["scaling"]["factor"]
    else:
        assert table.scaling is None


@pytest.mark.parametrize("layer", [0, 1, 3])
def test_gpt_oss_sinks_yarn_sliding_layers_and_experts(tmp_path: Path, layer: int) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "gpt_oss")
    config = transformers.GptOssConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=12, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=4, layer_types=["sliding_attention", "full_attention"] * 2, swiglu_limit=2.0,
        rope_parameters={"rope_type": "yarn", "rope_theta": 1000.0, "factor": 4.0, "original_max_position_embeddings": 8,
                         "beta_fast": 8.0, "beta_slow": 1.0, "truncate": False},
        pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    model = _build(folder, "GptOssForCausalLM", config, seed=9, experts_implementation="eager")  # float64 experts
    comp, ref = _opened(tmp_path, folder, model, layer)
    _check(comp, ref, *_llama_like(model, layer), kv_heads=2, tol=1e-4)  # YaRN's frequencies in float32
    sc, att = comp.scenario, model.model.layers[layer].self_attn
    assert [h.read(Sunk, lambda s: s.sink) for h in comp.heads] == att.sinks.detach().numpy().astype(np.float32).tolist()
    assert comp.heads[0].b_Q is not None and comp.b_O is not None and comp.heads[0].scale_is_default
    assert sc.rope is not None and sc.rope.scaling is not None and sc.rope.scaling.type == "yarn"
    assert sc.input.schedule == ("sliding 4", "full") * 2
    assert (sc.mask_kind == "sliding") == (layer % 2 == 0)


def _gemma_config(cls_name: str, vocab: int, **extra: Any) -> Any:
    base = dict(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, max_position_embeddings=64, sliding_window=4, query_pre_attn_scalar=12,
                pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    return getattr(transformers, cls_name)(**(base | extra))


@pytest.mark.parametrize("layer", [0, 1, 3])
def test_gemma2_sandwich_norms_softcap_and_scale(tmp_path: Path, layer: int) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "gemma2")
    config = _gemma_config("Gemma2Config", vocab, attn_logit_softcapping=5.0, final_logit_softcapping=30.0)
    model = _build(folder, "Gemma2ForCausalLM", config, seed=10)
    comp, ref = _opened(tmp_path, folder, model, layer)
    _check(comp, ref, *_llama_like(model, layer), kv_heads=2)
    sc = comp.scenario
    assert comp.heads[0].scale == pytest.approx(12**0.5) and sc.scale_from == "√query_pre_attn_scalar = √12 (Gemma 2)"
    assert comp.heads[0].need(Capped).softcap == 5.0
    assert sc.norm is not None
    gamma = model.model.layers[layer].input_layernorm.weight.detach().numpy().astype(np.float32)
    np.testing.assert_array_equal(sc.norm.gamma, gamma.astype(np.float64) + 1.0)  # (1 + γ)
    assert sc.input.schedule == ("sliding 4", "full") * 2 and "1 + γ" in sc.description


@pytest.mark.parametrize(("layer", "nested"), [(0, False), (2, True), (5, False), (5, True)])
def test_gemma3_qk_norm_per_layer_rope_base_and_scaling(tmp_path: Path, layer: int, nested: bool) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "gemma3")
    rope = {"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}
    config = _gemma_config("Gemma3TextConfig", vocab, num_hidden_layers=6, rope_parameters=rope)  # layer 5 is full
    model = _build(folder, "Gemma3ForCausalLM", config, seed=11)
    _place_tokenizer(tmp_path, folder)
    if not nested:  # transformers 4's form: rope_theta and rope_scaling for the full layers, rope_local_base_freq
        data = json.loads((folder / "config.json").read_text())
        del data["rope_parameters"]
        data |= {"rope_theta": 10000.0, "rope_local_base_freq": 100.0, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
        (folder / "config.json").write_text(json.dumps(data))
    comp = _open(tmp_path, folder, layer)
    ref = _decoder_reference(model, comp, layer)
    # Gemma's RMSNorm runs in float32 (x.float()) whatever the model's dtype, four of them a layer: after five layers
    # of them the stream agrees to float32's precision of its size (values near 20), not to ROPE_FLOAT32 absolute
    _check(comp, ref, *_llama_like(model, layer), kv_heads=2, tol=1e-4 if layer == 5 else ROPE_FLOAT32)
    sc, att = comp.scenario, model.model.layers[layer].self_attn
    assert sc.qk_norm is not None and sc.qk_norm.over == "head"
    np.testing.assert_array_equal(sc.qk_norm.gamma_q, att.q_norm.weight.detach().numpy().astype(np.float64) + 1.0)
    assert sc.rope is not None and sc.rope.base == (10000.0 if layer == 5 else 100.0)
    assert (sc.rope.scaling is not None) == (layer == 5)
    assert sc.input.schedule == ("sliding 4",) * 5 + ("full",)


def test_gemma3_multimodal_config_reads_its_text_config(tmp_path: Path) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "gemma3mm")
    config = _gemma_config("Gemma3TextConfig", vocab, num_hidden_layers=2)
    model = _build(folder, "Gemma3ForCausalLM", config, seed=12)
    _place_tokenizer(tmp_path, folder)
    text = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({"model_type": "gemma3", "text_config": text}))
    comp = _open(tmp_path, folder, 1)
    ref = _decoder_reference(model, comp, 1)
    _check(comp, ref, *_llama_like(model, 1), kv_heads=2)


@pytest.mark.parametrize("layer", [0, 2])
def test_bert_post_norm_bidirectional_encoder(tmp_path: Path, layer: int) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "bert")
    config = transformers.BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                     intermediate_size=48, max_position_embeddings=64, type_vocab_size=2, pad_token_id=0)
    model = _build(folder, "BertModel", config, seed=3)
    _place_tokenizer(tmp_path, folder)
    comp = _open(tmp_path, folder, layer)
    ref = _reference(model, model.encoder.layer, _ids(comp.scenario.description), layer,
                     lambda b: b.attention, lambda b: b.attention.output.dense)
    att = model.encoder.layer[layer].attention.self
    _check(comp, ref, _linear(att.query.weight), _linear(att.key.weight), _linear(att.value.weight), kv_heads=4, tol=EXACT)
    sc = comp.scenario
    assert sc.mask_kind == "none" and sc.norm is None and sc.rope is None
    assert comp.heads[0].b_Q is not None and comp.b_O is not None
    assert sc.input.kind == ("embedding+position+type" if layer == 0 else "residual")
    assert "post-norm" in sc.description and sc.input.schedule == ("full",) * 3


NOT_YET = [
    # (model_type, extra config keys, the feature the one line names)
    # none now: Qwen3.5 is read (tests/test_importers_qwen35.py)
]


@pytest.mark.parametrize(("model_type", "extra", "needle"), NOT_YET, ids=[f"{t}-{n[:12]}" for t, _, n in NOT_YET])
def test_not_yet_expressible_types_are_one_line_naming_the_feature(cli: Any, tmp_path: Path, model_type: str,
                                                                   extra: dict[str, Any], needle: str) -> None:
    """These cases change as the importer learns what they need (hf_pending.py)."""
    folder = tmp_path / model_type
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type, "hidden_size": 32} | extra))
    llama_tokenizer(folder / "tokenizer.json")
    (folder / "model.safetensors").write_bytes(b"")
    path = tmp_path / "head.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\n', encoding="utf-8")
    run = cli("--check", str(path))
    assert run.code == 2 and run.out == "", run.err
    assert run.err.count("\n") == 1 and "Traceback" not in run.err, run.err
    assert f"model_type {model_type!r} needs {needle}" in run.err, run.err


# --- the layer schedule: [input] schedule -------------------------------------------

GEMMA_LIKE = (["sliding 512"] * 5 + ["full"]) * 4 + ["sliding 512"] * 2  # 26 layers, one full in six


@pytest.mark.parametrize(("schedule", "chosen", "line"), [
    (["full", "full no-rope", "full", "full no-rope"], 1, "layers: 0 F · [1 N] · 2 F · 3 N (F full, N no RoPE)"),
    (["full"] * 4, 1, "layers: 0 F · [1 F] · 2–3 F (F full)"),
    (["sliding 4096", "sliding 4096", "full", "full"], 3, "layers: 0–1 S · 2 F · [3 F] (S sliding 4096, F full)"),
    (["linear"] * 3 + ["full"], 3, "layers: 0–2 L · [3 F] (F full, L linear attention)"),
    (["sliding 128", "sliding 4096 no-rope", "full"], 2,
     "layers: 0 S128 · 1 S4096N · [2 F] (S<W> sliding, window W, F full, N no RoPE)"),
    (GEMMA_LIKE, 11, "layers: 0–4 S · 5 F · 6–10 S · [11 F] · 12–16 S · 17 F · 18–22 S · 23 F · 24–25 S"
                     " (S sliding 512, F full)"),
    ((["sliding 512"] * 5 + ["full"]) * 8, 23, "layers: 0–4 S · 5 F · … · 12–16 S · 17 F · 18–22 S · [23 F] · 24–28 S"
                                                " · 29 F · 30–34 S · … · 42–46 S · 47 F (S sliding 512, F full)"),
])
def test_the_schedule_line_marks_the_chosen_layer(schedule: list[str], chosen: int, line: str) -> None:
    assert schedule_line(schedule, chosen) == line


def _residual(schedule: str, layer: int = 1) -> str:
    return BASE + f'[input]\nkind = "residual"\nlayer = {layer}\nschedule = {schedule}\n' + HEAD


@pytest.mark.parametrize(("text", "expected"), [
    (_residual('"full"'), "[input] schedule must be a non-empty list of strings, one per layer of the model, got a string"),
    (_residual("[]"), "[input] schedule must be a non-empty list of strings"),
    (_residual('["full", 3]'), "[input] schedule[1] = a number (3); expected a string"),
    (_residual('["full", "sliding"]'), "[input] schedule[1] = 'sliding'; expected 'full', 'sliding W' (W a whole number >= 1)"),
    (_residual('["full", "sliding 0"]'), "[input] schedule[1] = 'sliding 0'"),
    (_residual('["full", "linear no-rope"]'), "with ' no-rope' after full or sliding"),
    (_residual('["full", "full"]', layer=2), "[input] schedule lists 2 layers, but X enters layer 2; expected one entry per layer"),
])
def test_a_bad_schedule_is_one_line(cli: Any, write: Any, text: str, expected: str) -> None:
    path = write(text)
    run = cli("--check", str(path))
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1, run.err
    assert run.err.startswith(f"error: {path}: ") and expected in run.err, run.err


def test_a_schedule_is_shown_on_the_first_screen_and_in_markdown_and_kept_by_toml() -> None:
    text = 'description = "Two layers."\n' + BASE + '[input]\nkind = "residual"\nlayer = 1\nschedule = ["sliding 2", "full"]\n' + HEAD
    sc = parse_scenario(text, "s.toml")
    line = "layers: 0 S · [1 F] (S sliding 2, F full)"
    assert sc.input.schedule_text == line
    comp = compute(sc)
    presenter = Presenter(comp)
    assert presenter.frame(Position(0, 0), Modes()).description == f"Two layers.\n\n{line}"
    assert presenter.frame(Position(1, 0), Modes()).description == ""
    assert f"Two layers.\n\n{line}\n\nScaled dot-product" in to_markdown(comp)
    frozen = to_toml(sc)
    assert 'schedule = ["sliding 2", "full"]' in frozen
    assert parse_scenario(frozen, "f.toml").input.schedule == ("sliding 2", "full")


SCHEDULED = '''title = "A NoPE layer"
description = "Layer 3 of a model whose every fourth layer leaves RoPE out."
tokens = ["I", "love", "AI"]
X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
mask = "causal"

[input]
kind = "residual"
layer = 3
schedule = ["full", "full", "full", "full no-rope", "full", "full", "full", "full no-rope"]
''' + HEAD
SCHEDULE_LINE = "layers: 0–2 F · [3 N] · 4–6 F · 7 N (F full, N no RoPE)"


async def test_the_app_shows_the_schedule_on_the_first_screen(tmp_path: Path) -> None:
    from qkv_tui.ui.app import QKVApp
    from qkv_tui.ui.widgets.panels import ExplainPanel

    path = tmp_path / "nope.toml"
    path.write_text(SCHEDULED, encoding="utf-8")
    app = QKVApp(str(path))
    async with app.run_test(size=(120, 40)) as pilot:
        text = app.query_one(ExplainPanel).plain
        assert SCHEDULE_LINE in text and "a NoPE layer" in text
        await pilot.press("right")
        assert "layers:" not in app.query_one(ExplainPanel).plain  # the description's place: the first screen only


class TestScheduleSnapshots:
    @pytest.mark.parametrize(("size", "keys"), [((120, 40), []), ((80, 24), ["pagedown"])], ids=["120x40", "80x24"])
    def test_first_screen(self, snap_compare: Any, tmp_path: Path, size: tuple[int, int], keys: list[str]) -> None:
        from qkv_tui.ui.app import QKVApp

        path = tmp_path / "nope.toml"
        path.write_text(SCHEDULED, encoding="utf-8")
        assert snap_compare(QKVApp(str(path)), press=keys, terminal_size=size)


def test_the_package_never_imports_transformers_or_torch() -> None:
    """transformers is the tests' reference only: opening every family's folder needs neither it nor PyTorch."""
    import subprocess
    import sys

    code = (
        "import sys, pkgutil, importlib, qkv_tui\n"
        "for m in pkgutil.walk_packages(qkv_tui.__path__, 'qkv_tui.'):\n"
        "    if not m.name.endswith('__main__'): importlib.import_module(m.name)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'transformers', 'torch'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_gpt_oss_mixture_of_experts_matches_transformers() -> None:
    """gpt-oss's MoE MLP (for the layers before the chosen one) on its own, against transformers' GptOssMLP."""
    from qkv_tui.importers.stack import MoeMlp

    config = transformers.GptOssConfig(hidden_size=16, intermediate_size=12, num_local_experts=5, num_experts_per_tok=2,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=4, num_hidden_layers=2,
                                       vocab_size=32, swiglu_limit=1.5)
    mlp = transformers.models.gpt_oss.modeling_gpt_oss.GptOssMLP(config).double()
    _randomise(mlp, 4)
    x = torch.randn((1, 7, 16), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    with torch.no_grad():
        want = mlp(x)[0][0].numpy()
    p = {name: t.detach().numpy() for name, t in mlp.named_parameters()}
    ours = MoeMlp(p["router.weight"].T, p["router.bias"], p["experts.gate_up_proj"], p["experts.gate_up_proj_bias"],
                  p["experts.down_proj"], p["experts.down_proj_bias"], 2, float(config.swiglu_alpha), 1.5)
    np.testing.assert_allclose(ours(x[0].numpy()), want, rtol=1e-10, atol=1e-10)


def _edit_config(folder: Path, change: dict[str, Any]) -> None:
    data = json.loads((folder / "config.json").read_text())
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] |= value
        else:
            data[key] = value
    (folder / "config.json").write_text(json.dumps(data))


CONFIG_ERRORS = [
    ("Llama", {"rope_parameters": {"partial_rotary_factor": 0.5}}, "partial_rotary_factor = 0.5 is not supported"),
    ("Phi3", {"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}, "Phi-3 scales RoPE only by longrope"),
    ("Llama", {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, "rope_type 'dynamic' is not supported"),
    ("Phi3", {"rope_parameters": {"rope_type": "longrope"}}, "rope_parameters.rope_type 'longrope' is not supported"),
    ("SmolLM3", {"no_rope_layers": [1, 0]}, "no_rope_layers must list 1 (RoPE) or 0 (no RoPE) for each of the 4 layers"),
    ("Granite", {"attention_multiplier": 0}, "attention_multiplier = 0; expected a number > 0"),
    ("Granite", {"mlp_bias": True}, "mlp_bias = true is not supported"),
    ("Bert", {"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key' is not supported"),
    ("Bert", {"is_decoder": True}, "is_decoder = true is not supported"),
]


@pytest.mark.parametrize(("family", "change", "needle"), CONFIG_ERRORS, ids=[f"{f}-{next(iter(c))}" for f, c, _ in CONFIG_ERRORS])
def test_a_config_feature_the_format_lacks_is_one_line(cli: Any, tmp_path: Path, family: str, change: dict[str, Any],
                                                       needle: str) -> None:
    folder, vocab = _with_tokenizer(tmp_path, family.lower())
    if family == "Bert":
        config = transformers.BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=24, max_position_embeddings=64)
        _build(folder, "BertModel", config)
    else:
        _build(folder, f"{family}ForCausalLM", _decoder_config(f"{family}Config", vocab))
    _place_tokenizer(tmp_path, folder)
    _edit_config(folder, change)
    path = tmp_path / "head.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nlayer = 1\n', encoding="utf-8")
    run = cli("--check", str(path))
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1 and "Traceback" not in run.err, run.err
    assert needle in run.err, run.err
