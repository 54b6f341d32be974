"""Kimi Linear folders (model_type "kimi_linear") opened through the app, against transformers' own eager forward.

Tiny random KimiLinearForCausalLM checkpoints built with transformers' classes (KDA layers of 2 heads, MLA layers of
3 heads without RoPE, a dense first MLP then DeepSeek-V3-routed experts with a shared expert), saved with
save_pretrained (the Hub's key names) and opened at every layer type. Each comparison reads hooks inside the
model's forward: the layer's input X, every head's output (the rule's o before Kimi's gated norm, and what o_proj
reads, per head) and the output after o_proj; the residual stream after each layer against output_hidden_states.

The model runs in float64, but transformers computes several parts in float32 whatever the dtype: every
KimiLinearRMSNorm, the forget gate (``.float()``), the KDA rule (both functions cast q, k, v, g, β to float32),
KimiLinearRMSNormGated and the router's scores. So the agreement is float32's, relative to each array's largest
cell, as the Qwen3-Next importer's test measures it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.hf_folder import open_folder
from qkv_tui.importers.stack import residual_stream
from qkv_tui.kernels.deltanet_parts import Around

from .hooked_forward import forward_hooked
from .test_importers_families import TEXT, _ids, _open, _place_tokenizer, _randomise, _with_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

FLOAT32 = 2e-5  # relative to the largest cell: transformers' float32 norms, gates and rule (module docstring)
LAYERS = ["linear_attention", "full_attention", "linear_attention", "full_attention"]
KDA_HEADS, KDA_DIM, MLA_HEADS, D_V = 2, 6, 3, 5


def kimi(tmp_path: Path, seed: int, q_lora_rank: int | None = None) -> tuple[Path, Any]:
    """A tiny Kimi Linear checkpoint beside a LLaMA tokenizer; the model returned in float64, eager."""
    folder, vocab = _with_tokenizer(tmp_path, "kimi_linear")
    config = transformers.KimiLinearConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=40, moe_intermediate_size=12, num_hidden_layers=len(LAYERS),
        num_attention_heads=MLA_HEADS, num_key_value_heads=MLA_HEADS, kv_lora_rank=8, q_lora_rank=q_lora_rank,
        qk_rope_head_dim=4, qk_nope_head_dim=6, v_head_dim=D_V, num_local_experts=4, num_experts_per_tok=2, n_group=2,
        topk_group=1, layer_types=LAYERS, first_k_dense_replace=1, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        tie_word_embeddings=False, model_max_length=64,
        linear_attn_config={"head_dim": KDA_DIM, "num_heads": KDA_HEADS, "short_conv_kernel_size": 4})
    model = transformers.KimiLinearForCausalLM._from_config(config, attn_implementation="eager",
                                                             experts_implementation="eager")
    _randomise(model, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for block in model.model.layers:
            if hasattr(block.mlp, "gate"):  # the router's bias steers the choice: a zero one would test nothing
                block.mlp.gate.e_score_correction_bias.copy_(torch.randn(4, generator=gen) * 0.3)
            attn = block.self_attn
            if hasattr(attn, "forget_gate"):  # decays between e^-0.01 and e^-3: channels that keep and that forget
                attn.forget_gate.A_log.copy_(torch.rand(attn.forget_gate.A_log.shape, generator=gen) * 2 - 1.5)
    transformers.utils.logging.disable_progress_bar()
    model.save_pretrained(folder)
    _place_tokenizer(tmp_path, folder)
    return folder, model.double().eval()


def _hooked(model: Any, ids: list[int], layer: int) -> dict[str, np.ndarray]:
    """X entering ``layer``, the attention's inner results and its output, and every hidden state, from hooks."""
    seen: dict[str, np.ndarray] = {}
    block = model.model.layers[layer]
    attn = block.self_attn

    def keep(name: str, index: int = 0) -> Any:
        def hook(module: Any, args: tuple[Any, ...], *rest: Any) -> None:
            value = rest[-1] if rest else args[index]
            seen[name] = value[0].detach().double().numpy().copy()
        return hook

    hooks = [block.register_forward_pre_hook(keep("X")), attn.o_proj.register_forward_pre_hook(keep("merged")),
             attn.o_proj.register_forward_hook(keep("attn"))]
    if hasattr(attn, "o_norm"):  # the rule's o per head (n, H, d_k) and the gate's input z, before Kimi's norm
        hooks.append(attn.o_norm.register_forward_pre_hook(keep("o", 0)))
    out = forward_hooked(model, ids, hooks, output_hidden_states=True)
    for i, h in enumerate(out.hidden_states):
        seen[f"hidden{i}"] = h[0].numpy()
    return seen


def _close(ours: np.ndarray, theirs: np.ndarray) -> None:
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=FLOAT32 * max(1.0, float(np.abs(theirs).max())))


def test_the_residual_stream_matches_the_models_hidden_states_through_every_layer_type(tmp_path: Path) -> None:
    """KDA, MLA without RoPE, the dense MLP and the routed experts with the shared one, each run in NumPy."""
    folder, model = kimi(tmp_path, seed=51)
    opened = open_folder(folder, str(folder))
    assert opened.schedule == ("linear", "full", "linear", "full") and opened.rope is None and opened.positionless
    _, ids = opened.tokenize(TEXT)
    ref = _hooked(model, ids, 0)
    x = opened.embed(ids)  # (n, d_model)
    np.testing.assert_array_equal(x, ref["hidden0"])
    for i in range(3):  # the last hidden state is after the final norm, which no layer reads
        x = residual_stream(x, [opened.layer(i)], opened.rope)
        _close(x, ref[f"hidden{i + 1}"])


@pytest.mark.parametrize("layer", [0, 2])
def test_a_kda_layer_opens_as_deltanet_with_the_sigmoid_gated_norm(tmp_path: Path, layer: int) -> None:
    folder, model = kimi(tmp_path, seed=52 + layer)
    comp = _open(tmp_path, folder, layer)
    sc = comp.scenario
    ref = _hooked(model, _ids(sc.description), layer)
    dn = sc.deltanet
    assert dn is not None and dn.channels is not None and dn.io is not None
    assert dn.io.taps == 4 and dn.io.gate_o == "sigmoid" and dn.channels.W_fa is not None
    assert sc.rope is None and len(comp.heads) == KDA_HEADS and comp.heads[0].d_k == comp.heads[0].d_v == KDA_DIM
    _close(sc.X, ref["X"])
    for h, head in enumerate(comp.heads):
        _close(head.output, ref["o"][:, h])  # the delta rule's o, before the gated norm
        normed = head.need(Around).out_norm
        assert normed is not None and normed.gate == "sigmoid"
        _close(normed.out, ref["merged"][:, h * KDA_DIM:(h + 1) * KDA_DIM])  # what o_proj reads of this head
    _close(comp.concat, ref["merged"])
    _close(comp.output, ref["attn"])
    assert "Kimi Delta Attention" in sc.description and "σ(z)" in sc.description


@pytest.mark.parametrize("q_lora_rank", [None, 7])
@pytest.mark.parametrize("layer", [1, 3])
def test_an_mla_layer_opens_without_rope(tmp_path: Path, layer: int, q_lora_rank: int | None) -> None:
    folder, model = kimi(tmp_path, seed=60 + layer, q_lora_rank=q_lora_rank)
    comp = _open(tmp_path, folder, layer)
    sc = comp.scenario
    ref = _hooked(model, _ids(sc.description), layer)
    assert sc.mla is not None and sc.mla.rope is None and sc.rope is None  # NoPE: no [rope] at all
    assert sc.mla.d_rope == 4 and (sc.mla.W_DQ is not None) == (q_lora_rank is not None)
    _close(sc.X, ref["X"])
    for h, head in enumerate(comp.heads):
        _close(head.output, ref["merged"][:, h * D_V:(h + 1) * D_V])
    _close(comp.output, ref["attn"])
    assert "no RoPE" in sc.description


def test_model_heads_on_a_kda_layer_is_one_line(cli: Any, tmp_path: Path) -> None:
    folder, _ = kimi(tmp_path, seed=70)
    path = tmp_path / "heads.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nlayer = 0\nheads = [1]\n', encoding="utf-8")
    result = cli(str(path), "--check")
    assert result.code == 2 and result.out == ""
    assert result.err.count("\n") == 1 and "leave out model.heads" in result.err


def test_a_config_as_the_hub_ships_it_reads_the_same(tmp_path: Path) -> None:
    """No layer_types, mlp_layer_types or linear_* keys: the layers from linear_attn_config's 1-based lists, the sizes
    from its num_heads, head_dim and short_conv_kernel_size, the dense MLPs from first_k_dense_replace."""
    folder, model = kimi(tmp_path, seed=71)
    config = json.loads((folder / "config.json").read_text())
    for key in ("layer_types", "mlp_layer_types", "linear_num_heads", "linear_head_dim", "linear_conv_kernel_dim"):
        del config[key]
    config["linear_attn_config"].update(kda_layers=[1, 3], full_attn_layers=[2, 4])
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    opened = open_folder(folder, str(folder))
    assert opened.schedule == ("linear", "full", "linear", "full")
    _, ids = opened.tokenize(TEXT)
    ref = _hooked(model, ids, 0)
    x = opened.embed(ids)
    for i in range(3):
        x = residual_stream(x, [opened.layer(i)], opened.rope)
        _close(x, ref[f"hidden{i + 1}"])
    config["linear_attn_config"]["kda_layers"] = [1, 5]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ImporterError, match="kda_layers must list layer numbers 1 … 4"):
        open_folder(folder, str(folder))


def test_a_kda_layer_exported_as_a_plain_scenario_computes_the_same(cli: Any, tmp_path: Path) -> None:
    """--export toml writes the [deltanet] table, gate_o = "sigmoid" included; the plain file's JSON is the model's."""
    folder, _ = kimi(tmp_path, seed=72)
    path = tmp_path / "kda.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nlayer = 2\n', encoding="utf-8")
    plain = cli("--export", "toml", str(path))
    assert plain.code == 0 and 'gate_o = "sigmoid"' in plain.out and "W_fa = " in plain.out
    again = tmp_path / "plain.toml"
    again.write_text(plain.out, encoding="utf-8")
    first, second = json.loads(cli("--export", "json", str(path)).out), json.loads(cli("--export", "json", str(again)).out)
    assert first["deltanet"]["heads"][0]["gate_o"] == "sigmoid"
    np.testing.assert_array_equal(np.array(first["output"]), np.array(second["output"]))


REFUSED = [
    ({"qk_rope_head_dim": 0}, "qk_rope_head_dim = 0 is not supported; [mla] holds the shared key part as its d_rope"),
    ({"qk_rope_head_dim": 3}, "qk_rope_head_dim = 3 is not supported"),
    ({"num_key_value_heads": 1}, "num_key_value_heads = 1 differs from num_attention_heads = 3"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu' is not supported"),
    ({"attention_bias": True}, "attention_bias = true is not supported"),
    ({"layer_types": ["linear_attention"] * 3}, "layer_types must list \"full_attention\" or \"linear_attention\" for"
                                                " each of the 4 layers"),
]


def test_what_the_format_cannot_take_is_one_line(cli: Any, tmp_path: Path) -> None:
    folder, _ = kimi(tmp_path, seed=73)
    saved = json.loads((folder / "config.json").read_text())
    path = tmp_path / "layer.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nlayer = 1\n', encoding="utf-8")
    for change, expected in REFUSED:
        (folder / "config.json").write_text(json.dumps(saved | change), encoding="utf-8")
        run = cli("--check", str(path))
        assert (run.code, run.out) == (2, ""), run.err
        assert run.err.count("\n") == 1 and expected in run.err and "Traceback" not in run.err, run.err
