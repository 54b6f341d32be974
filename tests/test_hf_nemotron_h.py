"""NVIDIA Nemotron-H folders (importers/hf_nemotron_h.py) against transformers' own NemotronHForCausalLM.

A tiny random hybrid, built and saved by transformers' classes (the Hub's key names: ``backbone.``, experts one by
one), with one block of every kind: M - * E M * (Mamba-2, MLP, attention, mixture of experts, Mamba-2, attention).
Each layer that opens is opened through a [model] table and compared with hooks in the model's float64 eager
forward (``use_cache=False``: the Mamba-2 mixer's torch path, the chunked scan and the convolution's PyTorch
fallback; eager attention; eager experts): the stream entering the block (so every earlier block, the MLP's relu²
and the router included), the normed X̂ the mixer reads, each attention head's output (o_proj's input) or each SSD
head's y and its gated, group-normed output, and the mixer's output after o_proj / out_proj.

Float32 noise, not float64's: transformers runs NemotronHRMSNorm and the mixer's gated RMSNorm in float32 whatever
the model's dtype (hidden_states.to(torch.float32)), takes A = −e^A_log in float32, and routes the experts in
float32 (the router's F.linear on hidden_states.type(torch.float32)); every deeper layer's stream has passed
through them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui.core.cost import kv_cache
from qkv_tui.core.engine import compute
from qkv_tui.core.layer_schedule import schedule_line
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.ssd_part import SsdRecord
from qkv_tui.core.variants.ssd import TABLE as SSD
from qkv_tui.edges.export_toml import to_toml

from .hooked_forward import forward_hooked
from .test_importers_families import TEXT, _edit_config, _ids, _open, _place_tokenizer, _randomise, _with_tokenizer
from .test_importers_mamba2 import _refused

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.models.nemotron_h")

FLOAT32 = 2e-5  # relative to each compared matrix's largest cell: see the module's docstring
KINDS = ["linear_attention", "mlp", "full_attention", "moe", "linear_attention", "full_attention"]
D_MODEL, H, H_KV, D_K = 16, 4, 2, 6  # attention
MH, MP, G, N = 4, 4, 2, 3  # Mamba-2: heads, head_dim, groups, d_state


def _nemotron(tmp_path: Path, seed: int, **extra: Any) -> tuple[Path, Any]:
    folder, vocab = _with_tokenizer(tmp_path, "nemotron_h")
    config = transformers.NemotronHConfig(**({
        "vocab_size": vocab, "hidden_size": D_MODEL, "layers_block_type": KINDS, "num_attention_heads": H,
        "num_key_value_heads": H_KV, "head_dim": D_K, "intermediate_size": 24, "mamba_num_heads": MH,
        "mamba_head_dim": MP, "n_groups": G, "ssm_state_size": N, "conv_kernel": 3, "chunk_size": 2,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "moe_intermediate_size": 8,
        "moe_shared_expert_intermediate_size": 12, "max_position_embeddings": 64, "routed_scaling_factor": 1.5,
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2} | extra))
    model = transformers.NemotronHForCausalLM._from_config(config, attn_implementation="eager",
                                                           experts_implementation="eager")
    _randomise(model, seed)
    with torch.no_grad():
        for block in model.model.layers:
            if block.block_type == "linear_attention":  # a gentler A and steps that do not all sit at the clamp
                block.mixer.A_log.mul_(0.5)
                block.mixer.dt_bias.mul_(0.5)
            if block.block_type == "moe":  # a buffer _randomise leaves at 0: give it something to steer
                block.mixer.gate.e_score_correction_bias.copy_(torch.linspace(-0.3, 0.3, 4))
    transformers.utils.logging.disable_progress_bar()
    model.save_pretrained(folder)  # float32 safetensors under backbone., as the Hub's checkpoints
    _place_tokenizer(tmp_path, folder)
    return folder, model.double().eval()


def _grab(t: Any) -> np.ndarray:
    return np.array((t[0] if isinstance(t, tuple) else t)[0].detach().numpy())


def _reference(model: Any, ids: list[int], layer: int) -> dict[str, np.ndarray]:
    """What the eager forward computes in block ``layer``, caught by hooks."""
    seen: dict[str, np.ndarray] = {}
    block = model.model.layers[layer]
    watched: list[tuple[Any, str | None, str | None]] = [(block, "X", "block"), (block.mixer, "X_hat", "mixer")]
    if block.block_type == "full_attention":
        watched.append((block.mixer.o_proj, "merged", None))
    else:
        watched.append((block.mixer.norm, "y", "gated"))

    def before(key: str | None) -> Any:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if key is not None:
                seen[key] = _grab(args[0] if args else kwargs["hidden_states"])
        return hook

    def after(key: str | None) -> Any:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
            if key is not None:
                seen[key] = _grab(out)
        return hook

    handles = []
    for module, key_in, key_out in watched:
        handles += [module.register_forward_pre_hook(before(key_in), with_kwargs=True),
                    module.register_forward_hook(after(key_out), with_kwargs=True)]
    forward_hooked(model, ids, handles, use_cache=False)
    return seen


def _close(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=FLOAT32 * max(1.0, float(np.abs(theirs).max())))


def _linear(weight: Any) -> np.ndarray:
    return np.asarray(weight.detach().numpy().T, dtype=np.float64)  # nn.Linear is (out, in)


# time_step_min bites (0.4 sits above many softplus steps) while time_step_limit, which NemotronHMamba2Mixer does
# not read, says otherwise; biases on in_proj/out_proj and the MLPs; the experts' latent projection
CASES = [({}), ({"time_step_min": 0.4, "time_step_limit": (0.0, 0.3), "use_bias": True, "mlp_bias": True,
                 "moe_latent_size": 6})]


@pytest.mark.parametrize("extra", CASES, ids=["plain", "clamped-biased-latent"])
@pytest.mark.parametrize("layer", [2, 5])
def test_an_attention_layer_matches_the_eager_forward(tmp_path: Path, layer: int, extra: dict[str, Any]) -> None:
    folder, model = _nemotron(tmp_path, seed=70 + layer, **extra)
    comp = _open(tmp_path, folder, layer)
    ref = _reference(model, _ids(comp.scenario.description), layer)
    sc = comp.scenario
    _close(sc.X, ref["X"])  # every earlier block: Mamba-2 mixers, the relu² MLP, the experts, attention
    _close(comp.X_in, ref["X_hat"])  # the block's RMSNorm
    mixer = model.model.layers[layer].mixer
    q, k, v = _linear(mixer.q_proj.weight), _linear(mixer.k_proj.weight), _linear(mixer.v_proj.weight)
    assert len(comp.heads) == H
    for h, head in enumerate(comp.heads):
        g = h // (H // H_KV)
        assert head.kv_head == g
        np.testing.assert_array_equal(head.W_Q, q[:, h * D_K:(h + 1) * D_K])
        np.testing.assert_array_equal(head.W_K, k[:, g * D_K:(g + 1) * D_K])
        np.testing.assert_array_equal(head.W_V, v[:, g * D_K:(g + 1) * D_K])
        _close(head.output, ref["merged"][:, h * D_K:(h + 1) * D_K])
    _close(comp.output, ref["mixer"])  # o_proj
    _close(sc.X + comp.output, ref["block"])  # the residual add
    assert sc.rope is None and sc.mask_kind == "causal"  # NemotronHAttention never rotates
    assert (sc.input.kind, sc.input.layer) == ("residual", layer)


@pytest.mark.parametrize("extra", CASES, ids=["plain", "clamped-biased-latent"])
@pytest.mark.parametrize("layer", [0, 4])
def test_a_mamba2_layer_matches_the_eager_forward(tmp_path: Path, layer: int, extra: dict[str, Any]) -> None:
    folder, model = _nemotron(tmp_path, seed=80 + layer, **extra)
    comp = _open(tmp_path, folder, layer)
    ref = _reference(model, _ids(comp.scenario.description), layer)
    sc = comp.scenario
    _close(sc.X, ref["X"])
    _close(comp.X_in, ref["X_hat"])
    assert len(comp.heads) == MH
    for h, head in enumerate(comp.heads):
        cols = slice(h * MP, (h + 1) * MP)
        record = head.need(SsdRecord)
        _close(record.ssd.y, ref["y"][:, cols])  # the scan's y, D·x included, before the gate
        _close(head.output, ref["gated"][:, cols])  # y·SiLU(z), RMS-normed over its group of heads, times γ
        assert record.ssd.gap < 1e-9
    _close(comp.output, ref["mixer"])  # out_proj
    _close(sc.X + comp.output, ref["block"])
    table = SSD.of(sc)
    assert table is not None and (table.num_heads, table.num_groups, table.d_state, table.d) == (MH, G, N, MP)
    assert table.dt_limit == (extra.get("time_step_min", 0.001), float("inf"))  # the mixer's clamp
    assert (comp.b_O is not None) == bool(extra.get("use_bias"))
    if layer == 0:  # the token embeddings alone: nothing adds positions
        assert sc.input.kind == "embedding" and sc.rope is None


def test_the_experts_match_nemotron_h_moe(tmp_path: Path) -> None:
    """The NumPy mixture of experts against transformers' NemotronHMoE on the same inputs (float32 routing)."""
    from qkv_tui.importers.hf_folder import open_folder

    for case, extra in enumerate(CASES):
        (tmp_path / str(case)).mkdir()
        folder, model = _nemotron(tmp_path / str(case), seed=90, **extra)
        opened = open_folder(folder, str(folder))
        x = np.random.default_rng(4).normal(size=(7, D_MODEL)) * 2.0
        ours = opened.layer(3).mlp(x)
        with torch.no_grad():
            theirs = model.model.layers[3].mixer(torch.tensor(x[None]))[0].numpy()
        _close(ours, theirs)


@pytest.mark.parametrize(("layer", "what"), [(1, "an MLP block (layers_block_type 'mlp')"),
                                             (3, "a mixture-of-experts MLP block (layers_block_type 'moe')")])
def test_an_mlp_layer_is_one_line_naming_the_layers_that_open(cli: Any, tmp_path: Path, layer: int, what: str) -> None:
    folder, _ = _nemotron(tmp_path, seed=91)
    path = tmp_path / "mlp.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nlayer = {layer}\n', encoding="utf-8")
    said = _refused(cli, path)
    assert f"layer {layer} is {what}: it has no attention and no Mamba-2 mixer to show" in said
    assert "the layers that open are: attention 2, 5; Mamba-2 0, 4" in said


def test_the_schedule_marks_each_kind_and_the_cache_counts_only_attention(tmp_path: Path) -> None:
    folder, _ = _nemotron(tmp_path, seed=92)
    comp = _open(tmp_path, folder, 5)
    sc = comp.scenario
    assert sc.input.schedule == ("linear", "mlp", "full", "mlp", "linear", "full")
    assert schedule_line(sc.input.schedule, 5) == (
        "layers: 0 L · 1 - · 2 F · 3 - · 4 L · [5 F] (F full, L linear attention, - MLP only, no attention)")
    cache = kv_cache(sc, 2, 10)
    assert [lc.kind for lc in cache.layers] == ["linear", "mlp", "full", "mlp", "linear", "full"]
    assert [lc.per_token.value for lc in cache.layers] == [0, 0, H_KV * 2 * D_K * 2, 0, 0, H_KV * 2 * D_K * 2]
    said = sc.description
    assert "no RoPE" in said
    assert ("X is the embeddings with every earlier block's output added: 2 Mamba-2 mixer outputs, 1 attention"
            " output, 1 MLP (relu²) output, 1 mixture-of-experts output.") in said


def test_chosen_heads_of_a_mamba2_layer_are_one_line_and_of_an_attention_layer_open(cli: Any, tmp_path: Path) -> None:
    folder, model = _nemotron(tmp_path, seed=93)
    path = tmp_path / "heads.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nlayer = 4\nheads = [1]\n', encoding="utf-8")
    assert "layer 4 is a Mamba-2 layer" in _refused(cli, path)
    comp = _open(tmp_path, folder, 2, "heads = [3, 0]\n")
    ref = _reference(model, _ids(comp.scenario.description), 2)
    for head, h in zip(comp.heads, (3, 0), strict=True):
        assert head.kv_head == h // 2
        _close(head.output, ref["merged"][:, h * D_K:(h + 1) * D_K])


def test_the_toml_export_of_an_opened_layer_reads_back_to_the_same_numbers(tmp_path: Path) -> None:
    folder, _ = _nemotron(tmp_path, seed=94)
    for layer in (2, 4):
        comp = _open(tmp_path, folder, layer)
        again = compute(parse_scenario(to_toml(comp.scenario), "frozen.toml"))
        np.testing.assert_array_equal(again.output, comp.output)


def test_the_older_pattern_and_key_names_open_as_transformers_reads_them(tmp_path: Path) -> None:
    """hybrid_override_pattern in place of layers_block_type, and the mamba_* spellings NemotronHConfig renames."""
    folder, model = _nemotron(tmp_path, seed=95, conv_kernel=2)
    data = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    del data["layers_block_type"]
    data["hybrid_override_pattern"] = "M-*EM*"
    data["mamba_d_conv"] = data.pop("conv_kernel")
    (folder / "config.json").write_text(json.dumps(data), encoding="utf-8")
    comp = _open(tmp_path, folder, 5)
    ref = _reference(model, _ids(comp.scenario.description), 5)
    _close(comp.scenario.X, ref["X"])
    _close(comp.output, ref["mixer"])


REFUSED = [
    ({"mamba_hidden_act": "gelu"}, "mamba_hidden_act 'gelu' is not supported; expected 'silu'"),
    ({"mlp_hidden_act": "nope"}, "mlp_hidden_act 'nope' is not supported; expected one of: relu2,"),
    ({"layers_block_type": ["linear_attention", "conv"]}, "layers_block_type[1] = 'conv'; expected"),
    ({"n_groups": 3}, "n_groups = 3 does not divide mamba_num_heads = 4"),
    ({"hybrid_override_pattern": "M*X", "layers_block_type": None}, "hybrid_override_pattern = 'M*X'; expected"),
]


@pytest.mark.parametrize(("change", "said"), REFUSED)
def test_what_the_scenario_cannot_compute_is_one_line(cli: Any, tmp_path: Path, change: dict[str, Any],
                                                     said: str) -> None:
    folder, _ = _nemotron(tmp_path, seed=96)
    _edit_config(folder, change)
    path = tmp_path / "refused.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\n', encoding="utf-8")
    assert said in _refused(cli, path)


def test_the_input_stage_and_the_cache_page_say_what_a_hybrid_holds(tmp_path: Path) -> None:
    """The Input stage names each earlier block's one sub-layer (not "its attention output and then its MLP output"),
    and the cache page's why-GQA line reads the shown layer's cache (layer 0, a Mamba-2 layer, caches nothing)."""
    from qkv_tui.display import cost_view
    from qkv_tui.display.modes import Modes
    from qkv_tui.display.presenter import Presenter
    from qkv_tui.edges.export_markdown import to_markdown

    folder, _ = _nemotron(tmp_path, seed=97)
    comp = _open(tmp_path, folder, 5)
    page = " ".join(to_markdown(comp).split())  # its lines rejoined
    assert ("layers 0 … 4 ran over it, each adding the output of its one sub-layer (layer 2 attention; layers 0 and 4"
            " a linear-attention mixer, Mamba-2's in Nemotron-H; layers 1 and 3 an MLP or a mixture of experts)") in page
    assert "its attention output and then its MLP output" not in page
    presenter, modes = Presenter(comp), Modes()
    lines: list[str] = []
    for step in range(cost_view._steps(presenter, modes, 0)):
        ex = cost_view._frame(presenter, modes, step, 0).explanation
        lines += [ex.arithmetic, *ex.details]
    per_layer = H_KV * 2 * D_K * 2  # K+V of every K/V head, bf16
    assert any(line.startswith(f"why GQA: were every query head its own K/V head, a layer would cache Σ(d_k + d_v)·B ="
                               f" {H * 2 * D_K}·2 = {H * 2 * D_K * 2} B a token, not {per_layer}") for line in lines)


def test_the_heads_view_steps_over_the_layers_with_nothing_to_show(tmp_path: Path) -> None:
    from dataclasses import replace

    from qkv_tui.display import heads_view
    from qkv_tui.display.modes import Modes
    from qkv_tui.display.presenter import Presenter

    folder, _ = _nemotron(tmp_path, seed=98)
    presenter = Presenter(_open(tmp_path, folder, 2))
    up = heads_view._act(presenter, Modes(), "next_stage", 4)
    assert up is not None and up.heads_layer == 4  # over layer 3, a mixture of experts, to the Mamba-2 layer
    assert len(heads_view.shown(presenter, up).heads) == MH
    down = heads_view._act(presenter, replace(Modes(), heads_layer=2), "prev_stage", 4)
    assert down is not None and down.heads_layer == 0  # over layer 1, an MLP


def test_merged_experts_open_as_the_hub_s_one_by_one(tmp_path: Path) -> None:
    """transformers 5 holds the experts merged (experts.up_proj (E, inner, d), experts.down_proj (E, d, inner));
    a folder that stores them so gives the same stream."""
    from safetensors.numpy import load_file, save_file

    folder, model = _nemotron(tmp_path, seed=99)
    stored = folder / "model.safetensors"
    tensors = load_file(stored)
    m = "backbone.layers.3.mixer.experts."
    for name in ("up_proj", "down_proj"):
        tensors[m + name] = np.stack([tensors.pop(f"{m}{e}.{name}.weight") for e in range(4)])
    save_file(tensors, stored, metadata={"format": "pt"})
    comp = _open(tmp_path, folder, 5)
    ref = _reference(model, _ids(comp.scenario.description), 5)
    _close(comp.scenario.X, ref["X"])
