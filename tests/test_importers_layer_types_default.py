"""Every family's layer schedule where config.json has no ``layer_types``: what transformers' config class fills in.

A Gemma 2 or Gemma 3 config without layer_types was read as sliding on every layer, so the schedule
showed no global layer and Gemma 3's global layers turned with the local RoPE base. Each case here
builds the config with transformers' own class (transformers 5.24, the version in the venv), takes
its computed ``layer_types`` and ``sliding_window`` and what each family's attention does with them
(modeling_*.py: ``config.sliding_window if layer_type == "sliding_attention"``; Mistral and Phi-3 on
every layer; SmolLM3 only with use_sliding_window; Llama, Granite and OLMo 2 never), and compares
the importer's window and RoPE base for every layer with that.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qkv_tui.importers.hf_config import read_config, sliding_window
from qkv_tui.importers.hf_gemma import layer_rope
from qkv_tui.importers.schedule import hf_schedule

transformers = pytest.importorskip("transformers")

LAYERS = 7
BASE = {"hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 4, "num_hidden_layers": LAYERS,
        "intermediate_size": 8, "vocab_size": 10, "max_position_embeddings": 64}
CLASSES = {"gemma2": "Gemma2Config", "gemma3_text": "Gemma3TextConfig", "gpt_oss": "GptOssConfig", "qwen2": "Qwen2Config",
           "qwen3": "Qwen3Config", "smollm3": "SmolLM3Config", "mistral": "MistralConfig", "phi3": "Phi3Config",
           "llama": "LlamaConfig", "olmo2": "Olmo2Config", "granite": "GraniteConfig", "qwen3_next": "Qwen3NextConfig",
           "qwen3_5_text": "Qwen3_5TextConfig"}
TYPES = ["sliding_attention", "full_attention", "full_attention", "sliding_attention", "full_attention",
         "sliding_attention", "sliding_attention"]

CASES: list[tuple[str, dict[str, Any]]] = [
    ("gemma2", {}),  # alternating, the window 4096 by default
    ("gemma2", {"sliding_window": 3}),
    ("gemma2", {"sliding_window": None}),  # a sliding layer without a window is full, as in Gemma2Attention
    ("gemma3_text", {}),  # every sixth layer full
    ("gemma3_text", {"sliding_window_pattern": 3, "sliding_window": 5}),
    ("gemma3_text", {"sliding_window_pattern": 1}),  # every layer full
    ("gemma3_text", {"rope_theta": 250000.0, "rope_local_base_freq": 5000.0, "sliding_window": 5}),
    ("gemma3_text", {"layer_types": TYPES}),  # given: read as written
    ("gpt_oss", {}),  # alternating, the window 128 by default
    ("gpt_oss", {"sliding_window": 6}),
    ("qwen2", {"use_sliding_window": True, "max_window_layers": 4}),  # 4096 from layer 4 on
    ("qwen2", {"use_sliding_window": True, "max_window_layers": 2, "sliding_window": 3}),
    ("qwen2", {"use_sliding_window": False, "sliding_window": 3, "max_window_layers": 2}),
    ("qwen2", {"use_sliding_window": False, "sliding_window": 3, "layer_types": TYPES}),  # no window: full everywhere
    ("qwen3", {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 5}),
    ("qwen3", {"use_sliding_window": True, "sliding_window": 3, "layer_types": TYPES}),
    ("smollm3", {"use_sliding_window": True, "sliding_window": 5, "no_rope_layer_interval": 2}),  # the NoPE layers slide
    ("smollm3", {"use_sliding_window": True, "no_rope_layer_interval": 3}),  # no window: none slides
    ("smollm3", {"sliding_window": 5}),  # without use_sliding_window
    ("mistral", {}),  # 4096 on every layer by default
    ("mistral", {"sliding_window": None}),
    ("mistral", {"sliding_window": 7, "layer_types": TYPES}),  # MistralConfig ignores layer_types
    ("phi3", {"sliding_window": 5}),
    ("phi3", {}),
    ("llama", {"sliding_window": 2, "layer_types": TYPES}),  # LlamaAttention has no window
    ("olmo2", {"sliding_window": 2}),
    ("granite", {"sliding_window": 2}),
    ("qwen3_next", {}),  # every fourth layer full, the others linear
    ("qwen3_next", {"full_attention_interval": 3}),
    ("qwen3_5_text", {"full_attention_interval": 2}),
]


def transformers_windows(family: str, cfg: Any) -> list[tuple[str, int | None]]:
    """Each layer's (type, window) as the family's attention module reads its config."""
    out = []
    for i in range(LAYERS):
        kind = cfg.layer_types[i] if hasattr(cfg, "layer_types") and cfg.layer_types is not None else "full_attention"
        if family in ("mistral", "phi3"):  # getattr(config, "sliding_window", None) on every layer
            window = getattr(cfg, "sliding_window", None)
        elif family in ("llama", "olmo2", "granite"):
            window = None
        elif family == "smollm3":
            window = cfg.sliding_window if cfg.use_sliding_window and kind == "sliding_attention" else None
        else:
            window = cfg.sliding_window if kind == "sliding_attention" else None
        out.append((kind, window))
    return out


@pytest.mark.parametrize(("family", "extra"), CASES, ids=[f"{f}-{'-'.join(e) or 'defaults'}" for f, e in CASES])
def test_the_schedule_is_the_one_transformers_computes(tmp_path: Path, family: str, extra: dict[str, Any]) -> None:
    data = {"model_type": family, **BASE, **extra}
    cfg = getattr(transformers, CLASSES[family])(**{k: v for k, v in data.items() if k != "model_type"})
    (tmp_path / "config.json").write_text(json.dumps(data))
    config = read_config(tmp_path / "config.json")
    expected = transformers_windows(family, cfg)
    schedule = hf_schedule(config)
    for i, (kind, window) in enumerate(expected):
        if kind == "linear_attention":
            assert schedule[i] == "linear", (i, schedule)
            continue
        assert sliding_window(config, i) == window, (i, kind, window)
        assert schedule[i].split(" no-rope")[0] == ("full" if window is None else f"sliding {window}"), (i, schedule)
    if family == "gemma3_text":  # each layer turns with its layer type's base: the global one on the full layers
        bases = [layer_rope(config, i).base for i in range(LAYERS)]  # type: ignore[union-attr]
        assert bases == [cfg.rope_parameters[kind]["rope_theta"] for kind, _ in expected]
        assert config.rope_base == cfg.rope_parameters["full_attention"]["rope_theta"]


def test_gemma3_defaults_have_global_layers_with_the_global_base(tmp_path: Path) -> None:
    """The issue's case, spelt out: layers 5 and 11 of a 12-layer Gemma 3 are global and turn with 1,000,000."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3_text", **BASE, "num_hidden_layers": 12}))
    config = read_config(tmp_path / "config.json")
    assert [i for i, entry in enumerate(hf_schedule(config)) if entry == "full"] == [5, 11]
    assert {layer_rope(config, i).base for i in (5, 11)} == {1_000_000.0}  # type: ignore[union-attr]
    assert {layer_rope(config, i).base for i in (0, 4, 6, 10)} == {10_000.0}  # type: ignore[union-attr]


@pytest.mark.parametrize(("family", "key", "value"), [("gemma3_text", "sliding_window_pattern", 0),
                                                     ("qwen3_next", "full_attention_interval", "4"),
                                                     ("qwen2", "max_window_layers", -1)])
def test_a_pattern_that_is_not_a_count_is_one_line(tmp_path: Path, family: str, key: str, value: Any) -> None:
    from qkv_tui.importers import ImporterError

    (tmp_path / "config.json").write_text(json.dumps({"model_type": family, **BASE, key: value, "use_sliding_window": True,
                                                      "sliding_window": 3}))
    with pytest.raises(ImporterError, match=f"config.json: {key} = {value!r}; expected a whole number >= 1"):
        hf_schedule(read_config(tmp_path / "config.json"))


@pytest.mark.parametrize("family", sorted(CLASSES))
def test_the_rope_base_and_scaling_a_config_without_them_gets(tmp_path: Path, family: str) -> None:
    """rope_theta's default is the class's (gpt-oss 150,000, SmolLM3 2,000,000, Gemma 3's global layers 1,000,000,
    10,000 elsewhere), and gpt-oss without rope_scaling is YaRN with GptOssConfig's table."""
    cfg = getattr(transformers, CLASSES[family])(**BASE)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": family, **BASE}))
    config = read_config(tmp_path / "config.json")
    params = cfg.rope_parameters["full_attention"] if family == "gemma3_text" else cfg.rope_parameters
    assert config.rope is not None and config.rope.base == params["rope_theta"]
    scaling = config.rope.scaling_table()
    if params.get("rope_type", "default") == "default":
        assert scaling is None
    else:
        assert scaling is not None and scaling.pop("type") == params["rope_type"]
        assert scaling == {key: params[key] for key in scaling}
        assert set(params) - set(scaling) <= {"rope_type", "rope_theta"}


@pytest.mark.parametrize("family", ["gemma2", "gemma3_text"])
def test_a_bidirectional_gemma_is_one_line(tmp_path: Path, family: str) -> None:
    """Gemma3TextConfig halves the window and the mask looks both ways: not read as the causal decoder."""
    from qkv_tui.importers import ImporterError

    (tmp_path / "config.json").write_text(json.dumps({"model_type": family, **BASE, "use_bidirectional_attention": True}))
    with pytest.raises(ImporterError, match="use_bidirectional_attention = true is not supported"):
        read_config(tmp_path / "config.json")
