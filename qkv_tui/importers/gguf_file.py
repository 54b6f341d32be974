"""A GGUF file (llama.cpp's format, what Ollama, LM Studio and llama.cpp keep on disk) opened as a stack.Model.

``general.architecture`` "llama", "qwen2" and "qwen3". The metadata gives the sizes
(``{arch}.embedding_length``, ``block_count``, ``attention.head_count``/``head_count_kv``,
``attention.key_length``), the RMSNorm eps, the RoPE base and the context; the tokenizer comes from
the file's own ``tokenizer.ggml.*`` metadata (gguf_tokenizer.py). Tensors are read by name
(``blk.{i}.attn_q.weight`` …), memory-mapped, only those of the layers the head needs, and
dequantized by the gguf package's own code (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
Q5_K, Q6_K). ggml stores a weight as nn.Linear does, (out, in), so each is transposed to the x·W
orientation of the other openers.

Why a LLaMA file's head is "interleaved" and still the checkpoint's head: llama.cpp's converter
(convert_hf_to_gguf.py, LlamaModel.permute) reorders the rows of each head of q_proj and k_proj so
that ggml's RoPE, which turns neighbouring dimensions (2i, 2i+1), turns the pairs the Hugging Face
checkpoint turns with rotate_half, (i, i + d_k/2): row i goes to 2i and row i + d_k/2 to 2i+1. The
head keeps the file's weights and layout "interleaved". Q and K are reordered alike and a dot
product does not depend on the order of its terms, so every score, weight and output equals the
checkpoint's with layout "half"; only the order of Q's and K's columns differs. Qwen2 and Qwen3 are
converted unpermuted, and ggml turns them NeoX-style: layout "half", as in the checkpoint.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from qkv_tui.base.values import show as _show
from qkv_tui.importers.bounds import check_heads, check_layers
from qkv_tui.importers.errors import ImporterError, missing_package
from qkv_tui.importers.files import open_regular
from qkv_tui.importers.gguf_header import Header, TensorInfo
from qkv_tui.importers.gguf_tokenizer import gguf_tokenizer
from qkv_tui.importers.stack import Array, Attention, GatedMlp, Layer, Model, Norm, QkNorm, Rope, _silu

ARCHITECTURES = ("llama", "qwen2", "qwen3")
# the ggml types read, by name: what llama.cpp's usual quantisations (Q4_K_M, Q5_K_M, Q8_0 …) are made of
TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K")
LAYOUT = {"llama": "interleaved", "qwen2": "half", "qwen3": "half"}  # ggml's rope type: NORM for llama, NEOX for Qwen

PERMUTED_NOTE = (
    "The file's W_Q and W_K hold each head's rows in llama.cpp's order for ggml's RoPE, which turns"
    " neighbouring dimensions: the checkpoint's pair (i, i + dₖ/2) is (2i, 2i+1) here, so this head rotates"
    ' with layout "interleaved". Q and K are reordered alike, so every score equals the Hugging Face'
    ' checkpoint\'s with layout "half".'
)


def is_gguf(path: Path) -> bool:
    """Whether ``path`` names a GGUF file: by its suffix, or (an Ollama blob has none) by its first four bytes."""
    if path.suffix.lower() == ".gguf":
        return True
    try:
        if not path.is_file():
            return False
        fd = open_regular(path, "a GGUF file")
        try:
            return os.read(fd, 4) == b"GGUF"
        finally:
            os.close(fd)
    except (OSError, ValueError, ImporterError):
        return False


def open_gguf(path: Path, source: str) -> Model:
    """``source`` is the source as written (the model's name in messages and the description)."""
    try:
        import gguf  # noqa: F401  (the dequantizers; imported only when a GGUF is opened)
    except ImportError:
        raise ImporterError(missing_package("gguf", f"model.source {_show(source)}")) from None
    named = path.name if path.suffix.lower() == ".gguf" else source  # an Ollama blob's name says nothing
    shown = named if len(named) <= 60 else named[:57] + "..."
    header = Header(path, shown)
    meta = header.metadata
    parts = meta.get("split.count", 1)
    if not isinstance(parts, int) or parts > 1:
        raise ImporterError(f"{shown} is one part of a split GGUF (split.count = {parts!r}); expected one file:"
                            " merge the parts with llama-gguf-split --merge")
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise ImporterError(f"{shown}: general.architecture {_show(arch)} is not supported;"
                            f" expected one of: {', '.join(ARCHITECTURES)}")
    sizes = _Sizes(meta, arch, shown)
    check_layers(shown, f"{arch}.block_count", sizes.num_layers, header.tensors)
    numbers = sum(math.prod(info.shape) for info in header.tensors.values())
    check_heads(shown, f"{arch}.attention.head_count", sizes.num_heads, sizes.d_model, numbers)
    _plain_rope(header, meta, arch, sizes, shown)
    tokenize = gguf_tokenizer(meta, shown)
    reader = _Tensors(header, shown)
    d = sizes.d_model
    table = reader.info("token_embd.weight", (None, d))

    def embed(ids: list[int]) -> Array:
        rows = table.shape[0]
        for i, token_id in enumerate(ids):
            if not 0 <= token_id < rows:
                raise ImporterError(f"{shown}: the tokenizer gives token id {token_id} (token {i + 1} of model.text) but"
                                    f" token_embd.weight has {rows} rows; expected a vocabulary made for these weights")
        return reader.rows(table, ids)  # (n, d_model): only the rows of the text's tokens are dequantized

    def layer(i: int) -> Layer:
        return _layer(reader, sizes, arch, i)

    said = PERMUTED_NOTE if arch == "llama" else ""  # the description says why the layout is interleaved
    return Model(
        name=source, num_layers=sizes.num_layers, num_heads=sizes.num_heads, context=sizes.context,
        rope=Rope(LAYOUT[arch], sizes.rope_base), tokenize=tokenize, embed=embed, layer=layer,
        note=lambda layer: said,
        schedule=("full",) * sizes.num_layers,  # every architecture read here attends fully, rotated, in every layer
    )


class _Sizes:
    """The architecture's hyperparameters from ``{arch}.*`` metadata, each checked."""

    def __init__(self, meta: dict[str, Any], arch: str, shown: str) -> None:
        self.meta, self.arch, self.shown = meta, arch, shown
        self.d_model = self.whole("embedding_length")
        self.num_layers = self.whole("block_count")
        self.num_heads = self.whole("attention.head_count")
        self.num_kv_heads = self.whole("attention.head_count_kv", self.num_heads)
        if self.num_heads % self.num_kv_heads:
            raise self.fail(f"attention.head_count_kv = {self.num_kv_heads} does not divide"
                            f" attention.head_count = {self.num_heads}")
        if self.d_model % self.num_heads and f"{arch}.attention.key_length" not in meta:
            raise self.fail(f"embedding_length = {self.d_model} is not a multiple of attention.head_count = {self.num_heads}")
        self.d_k = self.whole("attention.key_length", self.d_model // self.num_heads)
        self.d_v = self.whole("attention.value_length", self.d_k)
        if self.d_k % 2:
            raise self.fail(f"attention.key_length = {self.d_k} is odd; RoPE needs an even d_k")
        self.context = self.whole("context_length")
        self.eps = self.number("attention.layer_norm_rms_epsilon", None)
        self.rope_base = self.number("rope.freq_base", 10000.0)  # llama.cpp's default

    def fail(self, what: str) -> ImporterError:
        return ImporterError(f"{self.shown}: {self.arch}.{what}")

    def whole(self, key: str, default: int | None = None) -> int:
        value = self.meta.get(f"{self.arch}.{key}")
        if value is None:
            if default is None:
                raise self.fail(f"{key} is missing; expected it in the file's metadata")
            return default
        if isinstance(value, np.ndarray):  # per-layer counts; one value for every layer is the same as a number
            if value.size and (value == value.flat[0]).all():
                value = value.flat[0]
            else:
                raise self.fail(f"{key} differs from layer to layer; not supported (every layer needs the same heads)")
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise self.fail(f"{key} = {value!r}; expected a whole number >= 1")
        return int(value)

    def number(self, key: str, default: float | None) -> float:
        value = self.meta.get(f"{self.arch}.{key}")
        if value is None:
            if default is None:
                raise self.fail(f"{key} is missing; expected it in the file's metadata")
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not math.isfinite(value) or value <= 0:
            raise self.fail(f"{key} = {value!r}; expected a number > 0")
        return float(value)


def _plain_rope(header: Header, meta: dict[str, Any], arch: str, sizes: _Sizes, shown: str) -> None:
    """Refuse every RoPE variant the Rotate stage does not compute (partial, scaled), naming it."""
    dims = meta.get(f"{arch}.rope.dimension_count")
    if dims is not None and (not isinstance(dims, int) or dims != sizes.d_k):
        raise ImporterError(f"{shown}: {arch}.rope.dimension_count = {dims!r} but the heads have d_k = {sizes.d_k}"
                            " (partial RoPE); not supported: [rope] rotates every dimension of d_k")
    kind = meta.get(f"{arch}.rope.scaling.type", "none")
    factor = meta.get(f"{arch}.rope.scaling.factor", meta.get(f"{arch}.rope.scale_linear", 1.0))
    unit = isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor in (0, 1)  # 0: unset
    if not (isinstance(kind, str) and kind == "none" and unit):
        raise ImporterError(f"{shown}: {arch}.rope.scaling.type {kind!r} (factor {factor}) is not supported; the Rotate stage"
                            " computes plain RoPE")
    if "rope_freqs.weight" in header.tensors:
        raise ImporterError(f"{shown}: rope_freqs.weight (Llama 3.1's RoPE frequency scaling) is not supported; the Rotate"
                            " stage computes plain RoPE")


class _Tensors:
    """The file's tensors by name, dequantized on demand to float64."""

    def __init__(self, header: Header, shown: str) -> None:
        import gguf

        self.header, self.shown, self.gguf = header, shown, gguf

    def __contains__(self, name: str) -> bool:
        return name in self.header.tensors

    def info(self, name: str, shape: tuple[int | None, ...]) -> TensorInfo:
        """The tensor's entry, refused unless its shape (NumPy's order) is ``shape`` (None: any length)."""
        found = self.header.tensors.get(name)
        if found is None:
            raise ImporterError(f"{self.shown} has no tensor {name!r}; expected llama.cpp's names for the architecture")
        if len(found.shape) != len(shape) or any(w is not None and w != s for w, s in zip(shape, found.shape)):
            got = "×".join(map(str, found.shape))
            want = "×".join("N" if s is None else str(s) for s in shape)
            raise ImporterError(f"{self.shown}: tensor {name!r} is {got}; the metadata implies {want}")
        qtype = self.gguf.GGMLQuantizationType(found.type_id)
        if qtype.name not in TYPES:
            raise ImporterError(f"{self.shown}: tensor {name!r} is {qtype.name}, which qkv-tui does not read;"
                                f" expected one of: {', '.join(TYPES)}")
        return found

    def get(self, name: str, shape: tuple[int | None, ...]) -> Array:
        found = self.info(name, shape)
        return self._dequantize(found, self._bytes(found))

    def rows(self, found: TensorInfo, ids: list[int]) -> Array:
        """Rows ``ids`` of a 2-D tensor: each row is whole blocks, so only those rows are dequantized."""
        raw = self._bytes(found)  # (rows, bytes per row)
        return self._dequantize(found, raw[ids] if ids else raw[:0])

    def _bytes(self, found: TensorInfo) -> np.ndarray:
        block, block_bytes = self.gguf.GGML_QUANT_SIZES[self.gguf.GGMLQuantizationType(found.type_id)]
        shape = (*found.shape[:-1], found.shape[-1] // block * block_bytes)
        return self.header.raw(found).reshape(shape)

    def _dequantize(self, found: TensorInfo, raw: np.ndarray) -> Array:
        qtype = self.gguf.GGMLQuantizationType(found.type_id)
        try:
            values = self.gguf.quants.dequantize(raw, qtype)  # the bytes, (rows, bytes per row) -> (rows, values)
        except (ValueError, NotImplementedError) as exc:
            raise ImporterError(f"{self.shown}: tensor {found.name!r} ({qtype.name}) cannot be dequantized ({exc})") from None
        out = np.asarray(values, dtype=np.float64).reshape(*raw.shape[:-1], -1)
        if not np.isfinite(out).all():
            raise ImporterError(f"{self.shown}: tensor {found.name!r} holds infinite or NaN values; expected finite weights")
        return out


def _layer(t: _Tensors, s: _Sizes, arch: str, i: int) -> Layer:
    b = f"blk.{i}."
    d, q_width, kv_width, v_width = s.d_model, s.num_heads * s.d_k, s.num_kv_heads * s.d_k, s.num_kv_heads * s.d_v

    def optional(name: str, width: int) -> Array | None:
        return t.get(name, (width,)) if name in t else None

    gate = t.get(b + "ffn_gate.weight", (None, d))  # (intermediate, d)
    inter = int(gate.shape[0])
    built = Layer(
        norm=Norm("rms", t.get(b + "attn_norm.weight", (d,)), None, s.eps),
        attention=Attention(
            t.get(b + "attn_q.weight", (q_width, d)).T, t.get(b + "attn_k.weight", (kv_width, d)).T,  # (out, in) -> x·W
            t.get(b + "attn_v.weight", (v_width, d)).T, t.get(b + "attn_output.weight", (d, s.num_heads * s.d_v)).T,
            optional(b + "attn_q.bias", q_width), optional(b + "attn_k.bias", kv_width),  # Qwen2's biases
            optional(b + "attn_v.bias", v_width), optional(b + "attn_output.bias", d),
            s.num_heads, s.num_kv_heads,
        ),
        mlp_norm=Norm("rms", t.get(b + "ffn_norm.weight", (d,)), None, s.eps),
        mlp=GatedMlp(gate.T, t.get(b + "ffn_up.weight", (inter, d)).T, t.get(b + "ffn_down.weight", (d, inter)).T, _silu),
        scale=None,
        window=None,
    )
    if arch == "qwen3":
        return _with_qk_norm(built, qk_norms(t, s, i), t.shown, i)
    return built


def qk_norms(t: _Tensors, s: _Sizes, i: int) -> tuple[Norm, Norm]:
    """Qwen3's QK-norm of layer i: an RMSNorm over each head's d_k, one gain vector for all query heads, one for all key heads."""
    b = f"blk.{i}."
    return (Norm("rms", t.get(b + "attn_q_norm.weight", (s.d_k,)), None, s.eps),
            Norm("rms", t.get(b + "attn_k_norm.weight", (s.d_k,)), None, s.eps))


def _with_qk_norm(layer: Layer, norms: tuple[Norm, Norm], shown: str, i: int) -> Layer:
    """A Qwen3 layer: its RMSNorm of each head's query and key (over d_k, one gain vector shared by the heads)."""
    q, k = norms
    return replace(layer, qk_norm=QkNorm("head", q.gamma, k.gamma, q.eps))
