"""Hugging Face "diffllama" folders (importers/hf_diffllama.py) against transformers' own DiffLlamaForCausalLM.

A tiny random checkpoint is built with transformers' classes and save_pretrained, opened through a scenario's
[model] table, and compared with hooks in the model's own float64 eager forward: the layer's input X (the
residual stream, so the earlier layers' differential attention runs too), every differential head's output
(o_proj's input, 2·head_dim columns per head) and the output after o_proj, at layer 0 and deeper layers.

Float32 noise, not float64's: transformers computes RoPE's cos and sin in float32 whatever the model's dtype, its
eager softmax in float32, and λ's dot products and e^ in float32 (torch.sum(..., dtype=torch.float32)). The
per-head mapping itself is checked to float64's precision by tests/test_differential_matches_diffllama.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.variants.differential import TABLE as DIFFERENTIAL
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.importers.hf_diffllama_layout import diffllama_heads
from qkv_tui.kernels.differential import DiffForward

from .test_importers_families import (
    TEXT,
    _build,
    _decoder_config,
    _decoder_reference,
    _open,
    _place_tokenizer,
    _with_tokenizer,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

FLOAT32 = 2e-5  # relative to each compared matrix's largest cell
H, KV, HEAD_DIM = 4, 2, 8


def _diffllama(tmp_path: Path, seed: int, **extra: Any) -> tuple[Path, Any]:
    folder, vocab = _with_tokenizer(tmp_path, "diffllama")
    config = _decoder_config("DiffLlamaConfig", vocab, num_hidden_layers=3, head_dim=HEAD_DIM,
                             num_attention_heads=H, num_key_value_heads=KV, **extra)
    model = _build(folder, "DiffLlamaForCausalLM", config, seed=seed)
    _place_tokenizer(tmp_path, folder)
    return folder, model


def _close(ours: np.ndarray, theirs: np.ndarray) -> None:
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=FLOAT32 * max(1.0, float(np.abs(theirs).max())))


def _mapped(model: Any, layer: int):
    att = model.model.layers[layer].self_attn
    w = lambda t: t.detach().numpy()
    bias = att.q_proj.bias is not None
    biases = (w(att.q_proj.bias), w(att.k_proj.bias), w(att.v_proj.bias)) if bias else (None, None, None)
    return att, diffllama_heads(w(att.q_proj.weight), w(att.k_proj.weight), w(att.v_proj.weight),
                                [w(att.lambda_q1), w(att.lambda_k1), w(att.lambda_q2), w(att.lambda_k2)],
                                H, KV, HEAD_DIM, biases=biases)


@pytest.mark.parametrize(("layer", "bias"), [(0, False), (2, False), (1, True)])
def test_every_differential_head_and_the_output_match_diffllama(tmp_path: Path, layer: int, bias: bool) -> None:
    folder, model = _diffllama(tmp_path, seed=20 + layer, attention_bias=bias)
    comp = _open(tmp_path, folder, layer)
    ref = _decoder_reference(model, comp, layer)
    sc = comp.scenario
    _close(sc.X, ref["X"])  # the residual stream through the earlier layers' differential attention
    att, lay = _mapped(model, layer)
    assert len(comp.heads) == H // 2 and sc.num_kv_heads == KV // 2
    w = 2 * HEAD_DIM
    for p, head in enumerate(comp.heads):
        c = p * (KV // 2) // (H // 2)
        assert head.kv_head == c
        # transformers' pairing: query heads p and p + H/2, K/V heads c and c + KV/2
        np.testing.assert_array_equal(head.W_Q, lay.W_Q[p])
        np.testing.assert_array_equal(head.W_K, lay.W_K[c])
        np.testing.assert_array_equal(head.W_V, lay.W_V[c])
        _close(head.output, ref["merged"][:, p * w:(p + 1) * w])
        f = head.need(DiffForward)
        assert f.lam.lambda_init == att.lambda_init
        with torch.no_grad():  # transformers' λ is float32: its own formula here in float64
            lam = float(torch.exp((att.lambda_q1 * att.lambda_k1).sum()) - torch.exp((att.lambda_q2 * att.lambda_k2).sum())
                        + att.lambda_init)
        assert f.lam.value == pytest.approx(lam, rel=1e-12)
    _close(comp.output, ref["attn"])
    df = DIFFERENTIAL.of(sc)
    assert df is not None and df.layer == layer and df.gamma is None
    assert df.eps == model.config.rms_norm_eps
    assert (comp.heads[0].b_Q is not None) == bias


def test_the_description_says_whose_pairing_it_is(tmp_path: Path) -> None:
    folder, _ = _diffllama(tmp_path, seed=30)
    comp = _open(tmp_path, folder, 0)
    said = comp.scenario.description
    assert "paired as transformers' DiffLlama pairs them: query head i with head i + H/2" in said
    assert "the paper's code pairs heads 2i and 2i + 1 instead" in said


def test_chosen_heads_keep_their_lambda_rows_and_match(tmp_path: Path) -> None:
    folder, model = _diffllama(tmp_path, seed=31)
    path = tmp_path / "heads.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nlayer = 1\nheads = [1]\n', encoding="utf-8")
    comp = compute(parse_scenario(path.read_text(encoding="utf-8"), str(path)))
    ref = _decoder_reference(model, comp, 1)
    assert len(comp.heads) == 1 and DIFFERENTIAL.of(comp.scenario) is not None
    assert DIFFERENTIAL.of(comp.scenario).lambda_q1.shape == (1, HEAD_DIM)
    _close(comp.heads[0].output, ref["merged"][:, 2 * HEAD_DIM:4 * HEAD_DIM])


def test_the_toml_export_of_an_opened_layer_reads_back_to_the_same_numbers(tmp_path: Path) -> None:
    folder, _ = _diffllama(tmp_path, seed=32)
    comp = _open(tmp_path, folder, 2)
    again = compute(parse_scenario(to_toml(comp.scenario), "frozen.toml"))
    assert DIFFERENTIAL.of(again.scenario) is not None and DIFFERENTIAL.of(again.scenario).layer == 2
    np.testing.assert_array_equal(again.output, comp.output)


def test_an_odd_head_count_is_one_line(cli: Any, tmp_path: Path) -> None:
    folder, _ = _diffllama(tmp_path, seed=33)
    import json

    data = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(data | {"num_attention_heads": 2, "num_key_value_heads": 1,
                                                           "head_dim": 16}))
    path = tmp_path / "odd.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\n', encoding="utf-8")
    run = cli("--check", str(path))
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1 and "Traceback" not in run.err, run.err
    assert "must both be even" in run.err, run.err
