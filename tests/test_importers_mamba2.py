"""Hugging Face "mamba2" folders (importers/hf_mamba2_folder.py) against transformers' own Mamba2ForCausalLM.

A tiny random checkpoint (4 heads of head_dim 4 in 2 groups, d_state 3, a 3-tap convolution, 3 blocks) is built
with transformers' classes and save_pretrained, opened through a scenario's [model] table at layer 0 and deeper,
and compared with hooks in the model's float64 eager forward (``use_cache=False``: the chunked scan, chunks of 2
tokens, with the torch fallbacks of the convolution and the scan): the stream entering the block, the normed X̂
the mixer reads, every head's y (the scan's output, before the gate), every head's gated and normalised output,
the mixer's output after out_proj and the block's output after the residual add.

Float32 noise, not float64's: transformers runs the block's Mamba2RMSNorm and the mixer's gated RMSNorm in
float32 whatever the model's dtype (hidden_states.to(torch.float32)), and its scan takes A = −e^A_log in float32
(self.A_log.float()); a deeper layer's stream has passed through those norms in every block below it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.ssd_part import SsdRecord
from qkv_tui.core.variants.ssd import TABLE as SSD
from qkv_tui.edges.export_toml import to_toml

from .hooked_forward import forward_hooked
from .test_importers_families import TEXT, _edit_config, _ids, _open, _place_tokenizer, _randomise, _with_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

FLOAT32 = 5e-6  # relative to each compared matrix's largest cell: see the module's docstring
H, P, G, N, D_MODEL, LAYERS = 4, 4, 2, 3, 8, 3


def _mamba2(tmp_path: Path, seed: int, **extra: Any) -> tuple[Path, Any]:
    folder, vocab = _with_tokenizer(tmp_path, "mamba2")
    config = transformers.Mamba2Config(**({
        "num_heads": H, "head_dim": P, "hidden_size": D_MODEL, "expand": 2, "state_size": N, "n_groups": G,
        "conv_kernel": 3, "chunk_size": 2, "num_hidden_layers": LAYERS, "vocab_size": vocab,
        "layer_norm_epsilon": 1e-5} | extra))
    model = transformers.Mamba2ForCausalLM._from_config(config)
    _randomise(model, seed)
    with torch.no_grad():  # a gentler A (−e^A_log) and steps that do not all sit at the clamp
        for block in model.backbone.layers:
            block.mixer.A_log.mul_(0.5)
            block.mixer.dt_bias.mul_(0.5)
    transformers.utils.logging.disable_progress_bar()
    model.save_pretrained(folder)  # float32 safetensors under backbone., as the Hub's checkpoints
    _place_tokenizer(tmp_path, folder)
    return folder, model.double().eval()


def _reference(model: Any, ids: list[int], layer: int) -> dict[str, np.ndarray]:
    """What the eager forward computes at ``layer``, caught by hooks on the block, its mixer and the gated norm."""
    seen: dict[str, np.ndarray] = {}
    block = model.backbone.layers[layer]

    def on(key_in: str | None, key_out: str | None) -> tuple[Any, Any]:
        def before(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if key_in is not None:
                seen[key_in] = grab(args[0] if args else kwargs["hidden_states"])

        def after(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
            if key_out is not None:
                seen[key_out] = grab(out)

        return before, after

    def grab(t: Any) -> np.ndarray:
        return np.array(t[0].detach().numpy())

    handles = []
    for module, names in ((block, ("X", "block")), (block.mixer, ("X_hat", "mixer")), (block.mixer.norm, ("y", "gated"))):
        before, after = on(*names)
        handles += [module.register_forward_pre_hook(before, with_kwargs=True),
                    module.register_forward_hook(after, with_kwargs=True)]
    forward_hooked(model, ids, handles, use_cache=False)
    return seen


def _close(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=FLOAT32 * max(1.0, float(np.abs(theirs).max())))


CASES = [(0, {}), (2, {}), (1, {"use_bias": True, "use_conv_bias": False, "time_step_limit": (0.05, 2.0)})]


@pytest.mark.parametrize(("layer", "extra"), CASES)
def test_the_stream_every_head_and_the_output_match_mamba2(tmp_path: Path, layer: int, extra: dict[str, Any]) -> None:
    folder, model = _mamba2(tmp_path, seed=50 + layer, **extra)
    comp = _open(tmp_path, folder, layer)
    ref = _reference(model, _ids(comp.scenario.description), layer)
    sc = comp.scenario
    _close(sc.X, ref["X"])  # the residual stream through the earlier blocks' mixers
    _close(comp.X_in, ref["X_hat"])  # the block's RMSNorm ([norm]): what in_proj reads
    assert len(comp.heads) == H
    for h, head in enumerate(comp.heads):
        cols = slice(h * P, (h + 1) * P)
        record = head.need(SsdRecord)
        _close(record.ssd.y, ref["y"][:, cols])  # the scan's y, D·x included, before the gate
        _close(head.output, ref["gated"][:, cols])  # y·SiLU(z), RMS-normalised over its group, times γ
        assert record.ssd.gap < 1e-9  # the recurrence and the attention form agree
    _close(comp.output, ref["mixer"])  # out_proj (and its bias) as W_O (and b_O)
    _close(sc.X + comp.output, ref["block"])  # the residual add: the next block's input
    table = SSD.of(sc)
    assert table is not None and (table.num_heads, table.num_groups, table.d_state, table.d) == (H, G, N, P)
    mixer = model.backbone.layers[layer].mixer
    np.testing.assert_array_equal(table.A, -np.exp(mixer.A_log.detach().numpy()))
    low, high = extra.get("time_step_limit", (0.0, float("inf")))
    assert table.dt_limit == (low, high)
    assert (comp.b_O is not None) == bool(extra.get("use_bias"))


def test_what_the_scenario_says_x_is(tmp_path: Path) -> None:
    folder, model = _mamba2(tmp_path, seed=60)
    first, deeper = _open(tmp_path, folder, 0), _open(tmp_path, folder, 2)
    # layer 0's X is the token embeddings alone: Mamba-2 adds no positions (unlike GPT-2's learned ones)
    assert first.scenario.input.kind == "embedding" and first.scenario.rope is None
    assert (deeper.scenario.input.kind, deeper.scenario.input.layer) == ("residual", 2)
    assert deeper.scenario.input.schedule == ("linear",) * LAYERS
    assert deeper.scenario.norm is not None and deeper.scenario.norm.kind == "rms"
    assert deeper.scenario.norm.eps == model.config.layer_norm_epsilon
    said = deeper.scenario.description
    assert "Mamba-2: RMSNorm, then the mixer, added to the stream" in said
    assert f"Its {H} heads are SSD heads of head_dim {P} in {G} groups sharing B and C (d_state {N})" in said


def test_the_toml_export_of_an_opened_layer_reads_back_to_the_same_numbers(tmp_path: Path) -> None:
    folder, _ = _mamba2(tmp_path, seed=61)
    comp = _open(tmp_path, folder, 1)
    again = compute(parse_scenario(to_toml(comp.scenario), "frozen.toml"))
    assert SSD.of(again.scenario) is not None
    np.testing.assert_array_equal(again.output, comp.output)


def test_the_older_embedding_key_opens_as_transformers_renames_it(tmp_path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    folder, model = _mamba2(tmp_path, seed=62)
    stored = folder / "model.safetensors"
    tensors = load_file(stored)
    tensors["backbone.embedding.weight"] = tensors.pop("backbone.embeddings.weight")
    save_file(tensors, stored, metadata={"format": "pt"})
    comp = _open(tmp_path, folder, 1)
    ref = _reference(model, _ids(comp.scenario.description), 1)
    _close(comp.scenario.X, ref["X"])


def _refused(cli: Any, path: Path) -> str:
    run = cli("--check", str(path))
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1 and "Traceback" not in run.err, run.err
    return str(run.err)


def test_chosen_heads_are_one_line(cli: Any, tmp_path: Path) -> None:
    folder, _ = _mamba2(tmp_path, seed=63)
    path = tmp_path / "heads.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nheads = [1]\n', encoding="utf-8")
    assert "the scenario needs every head; leave out model.heads" in _refused(cli, path)


REFUSED = [
    ({"hidden_act": "gelu"}, "hidden_act 'gelu' is not supported for mamba2; expected 'silu'"),
    ({"expand": 3}, "hidden_size·expand = 24 is not num_heads·head_dim = 16"),
    ({"n_groups": 3}, "n_groups = 3 does not divide num_heads = 4"),
    ({"time_step_limit": [0.5, 0.1]}, "time_step_limit = [0.5, 0.1]; expected two numbers 0 <= low < high"),
    ({"head_dim": 2, "expand": 1}, "backbone.layers.0.mixer.in_proj.weight has shape (48, 8); expected (32, 8)"),
]


@pytest.mark.parametrize(("change", "said"), REFUSED)
def test_what_the_scenario_cannot_compute_is_one_line(cli: Any, tmp_path: Path, change: dict[str, Any],
                                                     said: str) -> None:
    folder, _ = _mamba2(tmp_path, seed=64)
    _edit_config(folder, change)
    path = tmp_path / "refused.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\n', encoding="utf-8")
    assert said in _refused(cli, path)
