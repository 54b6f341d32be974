"""The KV cache per token against the arithmetic from a model's config, a real model folder's through
--export cost, and a GPT-2-XL-shaped layer's FLOPs against the accounting a course asks for (CS336's:
every product 2mnp, the projections, QKᵀ, AV and the output projection of one layer, no softmax FLOPs)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.cli import main
from qkv_tui.core.cost import Phase, kv_cache
from qkv_tui.core.inputs import Input
from qkv_tui.core.scenario import Head, Scenario, load_scenario
from qkv_tui.teach.stages import mix, project, score, wo
from tests.model_fixtures import build_llama


def z(*shape: int) -> np.ndarray:
    return np.zeros(shape)


def shaped(base: str, heads: int, kv: int, head_dim: int, layers: int, d_model: int = 4) -> Scenario:
    """A built-in with its heads replaced by zeros of the given shapes and a schedule of ``layers`` full layers."""
    sc = load_scenario(base)
    new = tuple(Head(f"h{h}", z(d_model, head_dim), z(d_model, head_dim), z(d_model, head_dim), kv_head=h * kv // heads)
                for h in range(heads))
    return dataclasses.replace(sc, X=z(sc.n, d_model), heads=new, W_O=None, num_kv_heads=kv,
                               input=Input("embedding", None, ("full",) * layers))


def test_a_llama_style_config_caches_131072_bytes_a_token() -> None:
    # 32 layers · 8 K/V heads · (128 + 128) · 2 bytes
    sc = shaped("gqa", 32, 8, 128, 32)
    kv = kv_cache(sc, 2, 4096)
    assert kv.per_token == 32 * 8 * (128 + 128) * 2 == 131_072
    assert len(kv.layers) == 32 and kv.at_context == 131_072 * 4096


def test_deepseek_v3s_latent_caches_d_c_plus_d_rope_a_layer() -> None:
    sc = load_scenario("mla")
    assert sc.mla is not None
    d = int(sc.X.shape[1])
    mla = dataclasses.replace(sc.mla, W_DKV=np.zeros((d, 512)), d_rope=64)
    sc = dataclasses.replace(sc, mla=mla, input=Input("embedding", None, ("full",) * 61))
    assert kv_cache(sc, 2, 1).per_token == (512 + 64) * 61 * 2 == 70_272


def test_sliding_layers_are_capped_at_their_window_and_linear_layers_cache_nothing() -> None:
    sc = dataclasses.replace(shaped("gqa", 4, 2, 8, 1), input=Input("embedding", None, ("sliding 16", "full", "linear")))
    kv = kv_cache(sc, 2, 100)
    per = 2 * (8 + 8) * 2
    assert [layer.per_token.value for layer in kv.layers] == [per, per, 0]
    assert kv.at_context == 16 * per + 100 * per


def test_a_model_folder_on_disk_through_export_cost(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # build_llama: 3 layers, 2 K/V heads of head_dim 6 -> 3 · 2 · (6 + 6) · 2 bytes a token
    build_llama(tmp_path / "tiny")
    code = main(["--export", "cost", "--model", str(tmp_path / "tiny"), "--text", "Alice was", "--context", "10"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["kv_cache"]["bytes_per_token"] == 3 * 2 * 12 * 2
    assert [layer["layer"] for layer in out["kv_cache"]["layers"]] == [0, 1, 2]
    assert out["kv_cache"]["bytes_at_context"] == 10 * 144
    assert set(out) == {"dtype", "bytes_per_number", "tokens", "context", "stages", "kv_cache"}
    assert out["dtype"] == "bf16" and out["bytes_per_number"] == 2 and out["context"] == 10


@pytest.mark.parametrize("args", [["--dtype", "fp12"], ["--context", "0"], ["--context", "ten"]])
def test_bad_cost_flags_say_one_error_line(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--export", "cost", "causal_mask", *args])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and err.startswith("error: ")


def test_gpt2_xl_layer_flops_as_a_course_counts_them() -> None:
    """GPT-2 XL: d_model 1600, 25 heads of 64, n = 1024. One layer's attention, products only:
    Q, K, V projections 3·2nd², QKᵀ 2n²d, AV 2n²d, W_O 2nd²: 8nd² + 4n²d."""
    n, d, H = 1024, 1600, 25
    sc = load_scenario("i_love_ai")
    tokens = tuple(f"t{i}" for i in range(n))
    heads = tuple(Head(f"h{h}", z(d, 64), z(d, 64), z(d, 64)) for h in range(H))
    sc = dataclasses.replace(sc, tokens=tokens, key_tokens=tokens, X=z(n, d), allow=np.tril(np.ones((n, n), bool)),
                             mask_kind="causal", heads=heads, W_O=z(H * 64, d))
    ph = Phase("prefill", n, n, n, 2, "bf16")
    faces = [spec.cost for spec in (project.SPEC, score.SPEC, mix.SPEC, wo.SPEC)]
    flops = sum(face(sc, ph).matmul.value for face in faces if face is not None)
    assert flops == 8 * n * d**2 + 4 * n**2 * d == 27_682_406_400
    assert 48 * flops == 1_328_755_507_200  # the 48 layers' attention, ≈ 1.33 TFLOPs a 1024-token forward pass


def test_a_gguf_files_whole_schedule_through_export_cost(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same count for a GGUF file: 4 layers, 2 K/V heads of head_dim 8 -> 4 · 2 · (8 + 8) · 2 bytes a token."""
    from tests.gguf_fixtures import build_hf, spm_tokenizer, write_gguf

    tok = spm_tokenizer(tmp_path)
    model = build_hf(tmp_path, "llama", len(tok["tokens"]), d=32, heads=4, kv=2, head_dim=8, inter=32, layers=4)
    write_gguf(tmp_path / "m.gguf", model, "llama", tok, "F32")
    code = main(["--export", "cost", "--model", str(tmp_path / "m.gguf"), "--text", "Alice was", "--dtype", "fp32"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["bytes_per_number"] == 4
    assert [layer["bytes_per_token"] for layer in out["kv_cache"]["layers"]] == [2 * 16 * 4] * 4
    assert out["kv_cache"]["bytes_per_token"] == 4 * 2 * 16 * 4


def test_a_linear_layer_shown_leaves_the_models_softmax_layers_out_rather_than_guess() -> None:
    """A Qwen3.5-style schedule seen from its linear layer: the full layers' K/V heads are not in the scenario, so
    they are named as not counted, not counted with the linear heads' sizes."""
    sc = load_scenario("deltanet")
    sc = dataclasses.replace(sc, input=Input("embedding", None, ("linear", "linear", "full")))
    kv = kv_cache(sc, 2, 10)
    assert [layer.layer for layer in kv.layers] == [0, 1] and kv.unknown == (2,)
    assert kv.per_token == 0 and kv.state > 0
