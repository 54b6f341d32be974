"""A config's layer and head counts are bounded by the weights before anything walks them one by one.

num_hidden_layers = 2^63 (OLMo 2, Phi-3, any family) built the layer schedule layer by layer for ever
(10^7 layers: 15.7 s and 827 MB, then accepted); num_attention_heads = 2^63 overflowed ``range`` and
2^26 built a list of every head. A GGUF's block_count was accepted and the heads view's layer bar
walked it. Each is now one line naming the key, the value and what the weights hold.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from qkv_tui.importers.bounds import layers_held

from .model_fixtures import build_gpt2, build_llama, one_error


@pytest.fixture(autouse=True)
def bounded_time() -> Iterator[None]:
    """The old code walked 2^63 layers: fail after 60 s instead of hanging the suite."""
    def stop(*_args: Any) -> None:
        raise TimeoutError("the importer walked a count the weights do not hold")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("model_type", ["llama", "olmo2", "phi3", "qwen2", "gemma2"])
@pytest.mark.parametrize("layers", [2**63, 10**7, 4])
def test_more_layers_than_the_weights_hold(cli: Callable[..., Any], tmp_path: Path, model_type: str, layers: int) -> None:
    build_llama(tmp_path / "m", model_type=model_type, config={"num_hidden_layers": layers})
    one_error(cli, tmp_path, str(tmp_path / "m"),
              f"config.json: num_hidden_layers = {layers}, but the weights hold 3 layers; expected at most 3")


def test_gpt2_n_layer(cli: Callable[..., Any], tmp_path: Path) -> None:
    build_gpt2(tmp_path / "g")
    config = json.loads((tmp_path / "g" / "config.json").read_text())
    (tmp_path / "g" / "config.json").write_text(json.dumps(config | {"n_layer": 2**63}))
    one_error(cli, tmp_path, str(tmp_path / "g"), f"config.json: n_layer = {2**63}, but the weights hold 3 layers")


@pytest.mark.parametrize("heads", [2**63, 2**26])
def test_more_heads_than_the_weights_can_hold(cli: Callable[..., Any], tmp_path: Path, heads: int) -> None:
    build_llama(tmp_path / "m", config={"num_attention_heads": heads, "num_key_value_heads": heads})
    one_error(cli, tmp_path, str(tmp_path / "m"), f"config.json: num_attention_heads = {heads} heads of width d_model = 16"
              " need more weights than the whole checkpoint holds")


def test_fewer_layers_than_the_weights_hold_still_open(cli: Callable[..., Any], tmp_path: Path) -> None:
    build_llama(tmp_path / "m", config={"num_hidden_layers": 2})  # an extra layer (DeepSeek's MTP layer) is not an error
    path = tmp_path / "head.toml"
    path.write_text(f'[model]\nsource = "{tmp_path / "m"}"\ntext = "Alice was"\nlayer = 1\n')
    assert cli("--check", str(path)).code == 0


def test_the_layer_indices_counted_by_name() -> None:
    names = ["model.layers.0.q", "model.layers.1.q", "model.layers.1.k", "transformer.h.2.attn", "h.5.x",
             "bert.encoder.layer.3.query", "blk.4.attn_q.weight", "model.layers.99999999999.q", "model.norm.weight",
             "model.visual.blocks.7.x"]
    assert layers_held(names) == 6  # 0 1 2 5 3 4; a ten-digit index and "blocks" are not layers


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any]]:
    """A tiny Qwen2 checkpoint and its tokenizer's GGUF metadata, built once (transformers prints while it saves)."""
    from .gguf_fixtures import build_hf, bytelevel_tokenizer

    folder = tmp_path_factory.mktemp("tiny")
    tok = bytelevel_tokenizer(folder / "tok")
    return build_hf(folder / "hf", "qwen2", len(tok["tokens"]), d=32, head_dim=8, inter=64), tok


def gguf_model(tmp_path: Path, tiny: tuple[Any, dict[str, Any]], **config: int) -> Path:
    """The checkpoint written as a GGUF file whose metadata says ``config`` (the tensors stay the checkpoint's)."""
    from .gguf_fixtures import write_gguf

    model, tok = tiny
    kept = {key: getattr(model.config, key) for key in config}
    for key, value in config.items():
        setattr(model.config, key, value)
    try:
        write_gguf(tmp_path / "m.gguf", model, "qwen2", tok)
    finally:
        for key, value in kept.items():
            setattr(model.config, key, value)
    return tmp_path / "m.gguf"


def test_a_gguf_block_count_past_its_tensors(cli: Callable[..., Any], tmp_path: Path, tiny_qwen2: Any) -> None:
    path = gguf_model(tmp_path, tiny_qwen2, num_hidden_layers=2**32 - 1)
    one_error(cli, tmp_path, str(path), f"m.gguf: qwen2.block_count = {2**32 - 1}, but the weights hold 3 layers")


def test_a_gguf_head_count_past_its_tensors(cli: Callable[..., Any], tmp_path: Path, tiny_qwen2: Any) -> None:
    path = gguf_model(tmp_path, tiny_qwen2, num_attention_heads=2**31, num_key_value_heads=2**31)
    one_error(cli, tmp_path, str(path), f"m.gguf: qwen2.attention.head_count = {2**31} heads of width d_model = 32")
