"""A Hugging Face config's RoPE, read as transformers reads it: base, partial rotary and scaling.

Both config forms: transformers 4's top-level ``rope_theta``, ``partial_rotary_factor`` and
``rope_scaling`` (``type`` or ``rope_type``), and transformers 5's ``rope_parameters`` (one dict, or
one per layer type, which must then agree: the scenario keeps one [rope]). The fields are passed
straight through under their own names, which the scenario's ``[rope] partial`` and
``[rope.scaling]`` share (docs/scenario-format.md); the defaults are those of transformers'
``standardize_rope_params`` and ``ROPE_INIT_FUNCTIONS``. A rope type the Rotate stage does not
compute (longrope, dynamic, …) is one line naming it; so is any scaling of Phi-3's, which transformers
reads as longrope whatever its type says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from qkv_tui.importers.errors import ImporterError

SCALED = ("linear", "llama3", "yarn")
FIELDS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "truncate"),
}
# rope_theta where the file gives none: the config class's default_theta (transformers 5.24), 10,000 for the others;
# Gemma 3's global layers (its local ones default to 10,000)
_DEFAULT_THETA = {"gpt_oss": 150000.0, "smollm3": 2000000.0, "gemma3_text": 1_000_000.0}
# what GptOssConfig puts in rope_parameters when the file has neither rope_scaling nor rope_parameters
_GPT_OSS_ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                 "original_max_position_embeddings": 4096}
# the families whose attention turns only the first r dimensions (apply_rotary_pos_emb)
PARTIAL_TYPES = ("phi3", "qwen3_5_text", "qwen3_next")


@dataclass(frozen=True)
class RopeConfig:
    base: float
    partial: float  # partial_rotary_factor; 1 = every dimension turns
    scaling: tuple[tuple[str, Any], ...] | None  # ("type", kind), then the type's fields, as [rope.scaling] spells them

    def scaling_table(self) -> dict[str, Any] | None:
        return None if self.scaling is None else dict(self.scaling)


def read_rope(name: str, data: dict[str, Any], model_type: str, layer_type: str | None = None) -> RopeConfig:
    """``layer_type``: the RoPE of that type of layer (Gemma 3's sliding and full layers differ); None: one for all."""
    params = data.get("rope_parameters")
    if isinstance(params, dict) and params and "rope_type" not in params and "rope_theta" not in params \
            and all(isinstance(t, dict) or t is None for t in params.values()):
        if layer_type is not None:
            table = params.get(layer_type)
            if not isinstance(table, dict):
                raise ImporterError(f"{name}: rope_parameters has no {layer_type!r} table; expected one per layer type")
            return _table(name, table, data, model_type, f"rope_parameters.{layer_type}", nested=True)
        # transformers 5 with several layer types: one dict per type; they must agree to share one [rope]
        read = {_table(name, t, data, model_type, "rope_parameters", nested=True) for t in params.values() if t}
        if len(read) != 1:
            bases = sorted({r.base for r in read})
            if len(bases) > 1:
                raise ImporterError(f"{name}: rope_parameters gives different bases per layer type ({bases}); not supported")
            raise ImporterError(f"{name}: rope_parameters gives a different RoPE per layer type; not supported")
        return read.pop()
    if isinstance(params, dict):
        return _table(name, params, data, model_type, "rope_parameters", nested=False)
    if model_type == "gemma3_text" and layer_type == "sliding_attention":
        # Gemma 3 in transformers 4's form: its sliding layers turn with their own base (10,000 where the file
        # gives none, Gemma3TextConfig's default_theta["local"]), never scaled
        return RopeConfig(_number(name, data.get("rope_local_base_freq"), "rope_local_base_freq", 10000.0), 1.0, None)
    scaling = data.get("rope_scaling")
    if scaling is None and params is None and model_type == "gpt_oss":
        scaling = _GPT_OSS_ROPE
    table = dict(scaling) if isinstance(scaling, dict) else {}
    return _table(name, table, data, model_type, "rope_scaling", nested=False)


def _table(name: str, table: dict[str, Any], data: dict[str, Any], model_type: str, where: str,
           nested: bool) -> RopeConfig:
    kind = table.get("rope_type", table.get("type", "default"))
    if kind not in ("default", *SCALED):
        raise ImporterError(
            f"{name}: {where}.rope_type {kind!r} is not supported; the Rotate stage computes plain RoPE and the"
            " scalings linear, llama3 and yarn"
        )
    if model_type == "phi3" and kind != "default":  # Phi3Config reads "su" and "yarn" as longrope, and takes no other
        raise ImporterError(
            f"{name}: {where}.rope_type {kind!r} is not supported; Phi-3 scales RoPE only by longrope (short_factor,"
            " long_factor), which the Rotate stage does not compute"
        )
    if model_type == "gemma3_text" and where.endswith("sliding_attention"):  # convert_rope_params_to_dict's fallbacks
        base = _number(name, table.get("rope_theta", data.get("rope_local_base_freq")), "rope_theta", 10000.0)
    else:
        default = _DEFAULT_THETA.get(model_type, 10000.0)
        base = _number(name, table.get("rope_theta", data.get("rope_theta")), "rope_theta", default)
    partial = table.get("partial_rotary_factor", data.get("partial_rotary_factor"))
    partial = 1.0 if partial is None else _number(name, partial, "partial_rotary_factor", 1.0)
    if partial != 1.0 and model_type not in PARTIAL_TYPES:
        raise ImporterError(
            f"{name}: partial_rotary_factor = {partial:g} is not supported for model_type {model_type!r}"
            " (its attention turns every dimension of d_k)"
        )
    if kind == "default":
        return RopeConfig(base, partial, None)
    given = dict(table)
    if kind in ("llama3", "yarn"):  # standardize_rope_params: Phi-3's top-level value first, then the context
        top = data.get("original_max_position_embeddings")
        if top is not None and not nested:
            given["original_max_position_embeddings"] = top
        given.setdefault("original_max_position_embeddings", data.get("max_position_embeddings"))
    if kind == "yarn":
        if given.get("factor") is None and given.get("original_max_position_embeddings"):
            given["factor"] = _number(name, data.get("max_position_embeddings"), "max_position_embeddings", 2048) \
                / given["original_max_position_embeddings"]
        for key in ("beta_fast", "beta_slow"):  # transformers reads them with `or`: 0 and null mean the default
            if not given.get(key):
                given.pop(key, None)
        if given.get("attention_factor") is None:
            given.pop("attention_factor", None)
            mscale, mscale_all = given.get("mscale"), given.get("mscale_all_dim")
            if mscale and mscale_all:  # DeepSeek's form of the attention factor, worked out as transformers does
                factor = float(given["factor"])
                given["attention_factor"] = _mscale(factor, float(mscale)) / _mscale(factor, float(mscale_all))
    fields: list[tuple[str, Any]] = [("type", kind)]
    for key in FIELDS[kind]:
        value = given.get(key)
        if value is None:
            if key in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
                raise ImporterError(f"{name}: {where} of rope_type {kind!r} is missing {key!r}")
            continue
        fields.append((key, value if key == "truncate" else float(value)))
    return RopeConfig(base, partial, tuple(fields))


def _mscale(scale: float, mscale: float) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _number(name: str, value: Any, key: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ImporterError(f"{name}: {key} = {value!r}; expected a number > 0")
    return float(value)
