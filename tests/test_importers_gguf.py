"""GGUF files against transformers: tiny LLaMA, Qwen2 and Qwen3 checkpoints built with its own classes.

Each checkpoint is written to GGUF as llama.cpp's converter writes it (tests/gguf_fixtures.py),
in every tensor type the importer reads. The opened head is compared with transformers' own eager
forward, captured by hooks: first with the model's weights replaced by what the file holds
(dequantized), which must agree to float32 rounding (transformers computes RoPE's angles in
float32), and the weights themselves with the checkpoint's within the quantisation's step.
"""

from __future__ import annotations

import copy
import json
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.importers import expand_model
from qkv_tui.importers.gguf_header import Header
from qkv_tui.kernels.rope import Rotated

from .gguf_fixtures import (
    build_hf,
    bytelevel_tokenizer,
    llama3_tokenizer,
    load_weights,
    permute,
    reference,
    spm_tokenizer,
    write_gguf,
)
from .model_fixtures import one_error

TEXT = "Alice was reading the book of her sister"
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]
# the largest error one weight may carry: a half-step of the format at the tensor's largest value
STEP = {"F32": 0.0, "F16": 2**-11, "BF16": 2**-8, "Q8_0": 1 / 127, "Q4_0": 1 / 8, "Q4_1": 1 / 15, "Q5_0": 1 / 16,
        "Q5_1": 1 / 31, "Q4_K": 1 / 15, "Q5_K": 1 / 31, "Q6_K": 1 / 31}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any, dict[str, Any]]]:
    """(folder, transformers model, tokenizer metadata) per architecture, built once."""
    made = {}
    for arch in ("llama", "qwen2", "qwen3"):
        folder = tmp_path_factory.mktemp(arch)
        tok = spm_tokenizer(folder) if arch == "llama" else bytelevel_tokenizer(folder)
        made[arch] = (folder, build_hf(folder, arch, len(tok["tokens"])), tok)
    return made


def ids_of(doc: dict[str, Any]) -> list[int]:
    return [int(i) for i in doc["description"].split(", ids ", 1)[1].split(".", 1)[0].split()]  # a note may follow


def hf_ids(folder: Path, text: str) -> list[int]:
    from tokenizers import Tokenizer

    return list(Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text).ids)


def with_weights(model: Any, stored: dict[str, np.ndarray]) -> Any:
    """A copy of the (shared) model holding the weights a file stores."""
    twin = copy.deepcopy(model)
    load_weights(twin, stored)
    return twin


def computed(source: Path, layer: int, tmp_path: Path, heads: list[int] | None = None) -> Any:
    lines = ["[model]", f"source = {json.dumps(str(source))}", f"text = {json.dumps(TEXT)}", f"layer = {layer}"]
    if heads is not None:
        lines.append(f"heads = {heads}")
    scenario_file = tmp_path / f"head-{source.stem}-{layer}.toml"
    scenario_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return compute(load_scenario(str(scenario_file)))


@pytest.mark.parametrize("qtype", TYPES)
def test_a_llama_gguf_is_the_checkpoints_head(checkpoints: dict, tmp_path: Path, qtype: str) -> None:
    folder, model, tok = checkpoints["llama"]
    stored = write_gguf(tmp_path / "m.gguf", model, "llama", tok, qtype)
    doc = expand_model({"model": {"source": str(tmp_path / "m.gguf"), "text": TEXT, "layer": 2}})
    ids = ids_of(doc)
    assert ids == hf_ids(folder, TEXT) and doc["tokens"][0] == "<s>"
    assert doc["rope"]["layout"] == "interleaved" and doc["rope"]["base"] == 500.0
    assert "every score equals the Hugging Face checkpoint's with layout \"half\"" in doc["description"]  # says why
    assert doc["norm"]["eps"] == pytest.approx(1e-6) and doc["mask"] == "causal"
    cfg = model.config
    # the file's weights, kept as llama.cpp permuted them: W_Q = permute(q_proj)ᵀ, and q_proj within a step
    original = {name: p.detach().numpy().copy() for name, p in model.named_parameters()}
    np.testing.assert_array_equal(np.array(doc["attention"]["W_Q"]),
                                  permute(stored["model.layers.2.self_attn.q_proj.weight"], cfg.num_attention_heads, None).T)
    for name, value in stored.items():
        assert np.abs(value - original[name]).max() <= STEP[qtype] * np.abs(original[name]).max() + 1e-7, name
    # its head, through qkv_tui's engine, is transformers' forward on the same weights
    ref = reference(with_weights(model, stored), ids, 2)
    np.testing.assert_allclose(np.array(doc["X"]), ref["X"], atol=3e-5, rtol=1e-5)
    comp = computed(tmp_path / "m.gguf", 2, tmp_path)
    np.testing.assert_allclose(np.stack([h.output for h in comp.heads]), ref["heads"], atol=3e-5, rtol=1e-5)
    np.testing.assert_allclose(comp.output, ref["attn"], atol=3e-5, rtol=1e-5)


@pytest.mark.parametrize("qtype", ["F32", "Q8_0", "Q4_K", "Q6_K"])
def test_a_qwen2_gguf_keeps_its_biases_and_the_half_layout(checkpoints: dict, tmp_path: Path, qtype: str) -> None:
    folder, model, tok = checkpoints["qwen2"]
    stored = write_gguf(tmp_path / "q.gguf", model, "qwen2", tok, qtype)
    doc = expand_model({"model": {"source": str(tmp_path / "q.gguf"), "text": TEXT, "layer": 1, "heads": [3, 0]}})
    ids = ids_of(doc)
    assert ids == hf_ids(folder, TEXT) and doc["tokens"][0] == "Alice"  # Qwen2 adds no BOS
    assert doc["rope"]["layout"] == "half"
    assert [h["kv_head"] for h in doc["heads"]] == [1, 0]
    np.testing.assert_array_equal(np.array(doc["heads"][0]["b_Q"]), stored["model.layers.1.self_attn.q_proj.bias"][192:256])
    ref = reference(with_weights(model, stored), ids, 1)
    comp = computed(tmp_path / "q.gguf", 1, tmp_path, heads=[3, 0])
    np.testing.assert_allclose(comp.heads[0].output, ref["heads"][3], atol=3e-5, rtol=1e-5)
    np.testing.assert_allclose(comp.heads[1].output, ref["heads"][0], atol=3e-5, rtol=1e-5)


def test_the_permuted_llama_head_scores_as_the_checkpoints_half_layout(checkpoints: dict, tmp_path: Path) -> None:
    """The GGUF head (interleaved, W_Q/W_K rows permuted) against the Hugging Face folder's (half, as trained)."""
    folder, model, tok = checkpoints["llama"]
    write_gguf(tmp_path / "m.gguf", model, "llama", tok, "F32")
    ours, theirs = computed(tmp_path / "m.gguf", 1, tmp_path), computed(folder, 1, tmp_path)
    assert ours.scenario.rope.layout == "interleaved" and theirs.scenario.rope.layout == "half"
    for a, b in zip(ours.heads, theirs.heads, strict=True):
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-9, rtol=1e-9)
        np.testing.assert_allclose(a.weights, b.weights, atol=1e-12)
        np.testing.assert_allclose(a.output, b.output, atol=1e-9, rtol=1e-9)
        # the same columns, reordered: the checkpoint's pair (i, i + d_k/2) is the file's (2i, 2i+1)
        d_k = a.Q.shape[1]
        order = [i // 2 + (d_k // 2) * (i % 2) for i in range(d_k)]
        np.testing.assert_allclose(a.Q, b.Q[:, order], atol=1e-9)
        np.testing.assert_allclose(a.need(Rotated).K_rot, b.need(Rotated).K_rot[:, order], atol=1e-9)


@pytest.mark.parametrize("qtype", ["F32", "Q8_0"])
def test_a_qwen3_gguf_keeps_its_qk_norm(checkpoints: dict, tmp_path: Path, qtype: str) -> None:
    from qkv_tui.importers.gguf_file import _Sizes, _Tensors, qk_norms

    _, model, tok = checkpoints["qwen3"]
    stored = write_gguf(tmp_path / "q3.gguf", model, "qwen3", tok, qtype)
    header = Header(tmp_path / "q3.gguf", "q3.gguf")
    q_norm, k_norm = qk_norms(_Tensors(header, "q3.gguf"), _Sizes(header.metadata, "qwen3", "q3.gguf"), 1)
    attn = model.model.layers[1].self_attn
    np.testing.assert_array_equal(q_norm.gamma, attn.q_norm.weight.detach().float().numpy())
    np.testing.assert_array_equal(k_norm.gamma, attn.k_norm.weight.detach().float().numpy())
    assert q_norm.eps == pytest.approx(1e-6)
    doc = expand_model({"model": {"source": str(tmp_path / "q3.gguf"), "text": TEXT, "layer": 1}})
    assert doc["qk_norm"]["over"] == "head" and doc["qk_norm"]["gamma_q"] == q_norm.gamma.tolist()
    assert doc["rope"]["layout"] == "half"
    # layer 0's QK-norm runs in the residual stream, layer 1's in the head: both against transformers' own forward
    ref = reference(with_weights(model, stored), ids_of(doc), 1)
    np.testing.assert_allclose(np.array(doc["X"]), ref["X"], atol=3e-5, rtol=1e-5)
    comp = computed(tmp_path / "q3.gguf", 1, tmp_path)
    np.testing.assert_allclose(np.stack([h.output for h in comp.heads]), ref["heads"], atol=3e-5, rtol=1e-5)
    np.testing.assert_allclose(comp.output, ref["attn"], atol=3e-5, rtol=1e-5)


def test_the_header_reader_agrees_with_ggufs_own(checkpoints: dict, tmp_path: Path) -> None:
    import gguf

    _, model, tok = checkpoints["qwen2"]
    write_gguf(tmp_path / "q.gguf", model, "qwen2", tok, "Q4_K")
    ours, theirs = Header(tmp_path / "q.gguf", "q.gguf"), gguf.GGUFReader(tmp_path / "q.gguf")
    keys = [k for k in theirs.fields if not k.startswith("GGUF.")]
    assert list(ours.metadata) == keys
    for key in keys:
        want, got = theirs.fields[key].contents(), ours.metadata[key]
        assert (got.tolist() if isinstance(got, np.ndarray) else got) == pytest.approx(want) if not isinstance(want, (str, list)) or (
            isinstance(want, list) and want and not isinstance(want[0], str)) else got == want, key
    assert [t.name for t in theirs.tensors] == list(ours.tensors)
    for t in theirs.tensors:
        mine = ours.tensors[t.name]
        assert (mine.dims, mine.type_id, mine.start, mine.size) == (tuple(int(d) for d in t.shape), int(t.tensor_type),
                                                                     t.data_offset, t.n_bytes)
        assert bytes(ours.raw(mine)) == t.data.tobytes()


# --- the tokenizer from the file's metadata ---------------------------------------------------

TEXTS = [TEXT, "  two spaces, then numbers 12345 and café — naïve ☃ 😀", "<s> in the middle of a text</s>",
         "tired\nof sitting\tby her sister", "ALICE WAS"]


@pytest.mark.parametrize("with_merges", [True, False])
def test_a_sentencepiece_vocabulary_tokenizes_as_its_tokenizer_json(checkpoints: dict, tmp_path: Path,
                                                                     with_merges: bool) -> None:
    from qkv_tui.importers.gguf_tokenizer import gguf_tokenizer

    folder, model, tok = checkpoints["llama"]
    write_gguf(tmp_path / "m.gguf", model, "llama", tok | ({} if with_merges else {"merges": None}), "F32")
    tokenize = gguf_tokenizer(Header(tmp_path / "m.gguf", "m.gguf").metadata, "m.gguf")
    for text in TEXTS:
        assert tokenize(text)[1] == hf_ids(folder, text), text


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_a_byte_level_vocabulary_tokenizes_as_its_tokenizer_json(checkpoints: dict, tmp_path: Path, arch: str) -> None:
    from qkv_tui.importers.gguf_tokenizer import gguf_tokenizer

    folder, model, tok = checkpoints[arch]
    write_gguf(tmp_path / "q.gguf", model, arch, tok, "F32")
    tokenize = gguf_tokenizer(Header(tmp_path / "q.gguf", "q.gguf").metadata, "q.gguf")
    for text in [*TEXTS, "the end<|endoftext|>"]:
        assert tokenize(text)[1] == hf_ids(folder, text), text
    assert tokenize("<|endoftext|>")[1] == [tok["eos"]]  # a control token is one token, not its characters


def test_a_llama3_vocabulary_takes_whole_words_and_puts_its_bos_first(tmp_path: Path) -> None:
    from qkv_tui.importers.gguf_tokenizer import gguf_tokenizer

    tok = llama3_tokenizer(tmp_path)
    model = build_hf(tmp_path, "llama", len(tok["tokens"]), d=32, head_dim=8, inter=64)
    write_gguf(tmp_path / "m.gguf", model, "llama", tok, "F32")
    tokenize = gguf_tokenizer(Header(tmp_path / "m.gguf", "m.gguf").metadata, "m.gguf")
    for text in TEXTS:
        assert tokenize(text)[1] == hf_ids(tmp_path, text), text
    assert tokenize("Alice")[0][0] == "<|begin_of_text|>"


# --- bad files: one line each through --check -------------------------------------------------


@pytest.fixture(scope="module")
def good(checkpoints: dict, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    _, model, tok = checkpoints["llama"]
    path = tmp_path_factory.mktemp("good") / "m.gguf"
    write_gguf(path, model, "llama", tok, "Q8_0")
    return path.read_bytes()


def test_a_good_file_passes_check(cli: Callable[..., Any], tmp_path: Path, good: bytes) -> None:
    (tmp_path / "m.gguf").write_bytes(good)
    (tmp_path / "head.toml").write_text('[model]\nsource = "m.gguf"\ntext = "Alice was reading"\n', encoding="utf-8")
    run = cli("--check", str(tmp_path / "head.toml"))
    assert run.code == 0 and run.out.startswith("ok: "), run.err


CUTS = [
    (lambda raw: raw[:-1000], "is cut short: tensor 'output.weight' lies beyond the end of the file"),
    (lambda raw: raw[:3000], "is cut short: the header ends inside"),
    (lambda raw: raw[:10], "is 10 bytes long; a GGUF file starts with a 24-byte header"),
    (lambda raw: b"", "is 0 bytes long"),
    (lambda raw: b"GGML" + raw[4:], "is not a GGUF file: it starts with b'GGML'"),
    (lambda raw: raw[:4] + struct.pack("<I", 1) + raw[8:], "is GGUF version 1; expected version 2 or 3"),
    (lambda raw: raw[:4] + struct.pack(">I", 3) + raw[8:], "is a big-endian GGUF file"),
    (lambda raw: raw[:16] + struct.pack("<Q", 2**40) + raw[24:], "claims 1,099,511,627,776 metadata entries; expected at most 65,536"),
    (lambda raw: raw[:8] + struct.pack("<Q", 2**33) + raw[16:], "claims 8,589,934,592 tensors; expected at most 65,536"),
    (lambda raw: raw[:24] + struct.pack("<Q", 2**50) + raw[32:], "a length of 1,125,899,906,842,624 bytes; expected at most"),
]


@pytest.mark.parametrize(("cut", "needle"), CUTS)
def test_a_corrupt_or_truncated_file_is_one_line(cli: Callable[..., Any], tmp_path: Path, good: bytes,
                                                 cut: Callable[[bytes], bytes], needle: str) -> None:
    (tmp_path / "m.gguf").write_bytes(cut(good))
    one_error(cli, tmp_path, "m.gguf", needle)


def test_a_huge_string_array_is_refused_by_its_count(cli: Callable[..., Any], tmp_path: Path) -> None:
    key = b"tokenizer.ggml.tokens"
    raw = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 8, 2**45)
    (tmp_path / "m.gguf").write_bytes(raw + b"\0" * 64)
    one_error(cli, tmp_path, "m.gguf", "gives the array 'tokenizer.ggml.tokens' 35,184,372,088,832 strings; expected at most")


def test_an_unknown_ggml_type_is_named(cli: Callable[..., Any], tmp_path: Path) -> None:
    name = b"blk.0.attn_q.weight"
    table = struct.pack("<Q", len(name)) + name + struct.pack("<IQIQ", 1, 32, 99, 0)  # 1-D, 32 values, type 99
    raw = b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + table
    (tmp_path / "m.gguf").write_bytes(raw + b"\0" * (32 - len(raw) % 32) + b"\0" * 256)
    one_error(cli, tmp_path, "m.gguf", "stores tensor 'blk.0.attn_q.weight' as ggml type 99, which the gguf package does not know")


def test_a_fifo_or_a_device_is_refused_without_opening_it(cli: Callable[..., Any], tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "m.gguf")
    one_error(cli, tmp_path, "m.gguf", "m.gguf is a named pipe (FIFO); expected a GGUF file (a regular file)")
    (tmp_path / "m.gguf").unlink()
    (tmp_path / "m.gguf").symlink_to("/dev/zero")
    one_error(cli, tmp_path, "m.gguf", "m.gguf is a character device; expected a GGUF file (a regular file)")


META_CASES = [
    ({"general.architecture": "gemma2"}, "general.architecture 'gemma2' is not supported; expected one of: llama, qwen2, qwen3"),
    ({"split.count": 3}, "is one part of a split GGUF (split.count = 3)"),
    ({"split.count": "three"}, "is one part of a split GGUF (split.count = 'three')"),
    ({"llama.rope.scaling.factor": 4.0}, "llama.rope.scaling.type 'none' (factor 4.0) is not supported"),
    ({"llama.rope.scaling.type": "linear"}, "llama.rope.scaling.type 'linear' (factor 1.0) is not supported"),
    ({"llama.rope.dimension_count": 32}, "llama.rope.dimension_count = 32 but the heads have d_k = 64 (partial RoPE)"),
    ({"tokenizer.ggml.pre": "mystery-bpe", "tokenizer.ggml.model": "gpt2"}, "tokenizer.ggml.pre 'mystery-bpe' is not a pre-tokenizer"),
    ({"tokenizer.ggml.model": "bert"}, "tokenizer.ggml.model 'bert' is not supported"),
]


@pytest.mark.parametrize(("meta", "needle"), META_CASES)
def test_what_the_format_cannot_express_is_named(cli: Callable[..., Any], checkpoints: dict, tmp_path: Path,
                                                 meta: dict[str, Any], needle: str) -> None:
    import gguf

    _, model, tok = checkpoints["llama"]
    original = gguf.GGUFWriter.add_architecture

    def arch_first(self: Any) -> None:  # general.architecture is written by the writer itself
        if "general.architecture" in meta:
            self.add_string("general.architecture", meta["general.architecture"])
        else:
            original(self)

    rest = {k: v for k, v in meta.items() if k != "general.architecture"}
    if "tokenizer.ggml.model" in rest:
        tok = tok | {"model": rest.pop("tokenizer.ggml.model")}
    if "tokenizer.ggml.pre" in rest:
        tok = tok | {"pre": rest.pop("tokenizer.ggml.pre"), "merges": tok["merges"]}
    gguf.GGUFWriter.add_architecture = arch_first  # type: ignore[method-assign]
    try:
        write_gguf(tmp_path / "m.gguf", model, "llama", tok, "F16", meta=rest)
    finally:
        gguf.GGUFWriter.add_architecture = original  # type: ignore[method-assign]
    one_error(cli, tmp_path, "m.gguf", needle)


def test_an_unsupported_tensor_type_is_named(cli: Callable[..., Any], checkpoints: dict, tmp_path: Path) -> None:
    import gguf

    _, model, tok = checkpoints["llama"]
    original = gguf.GGUFWriter.add_tensor

    def tq2(self: Any, name: str, tensor: np.ndarray, raw_shape: Any = None, raw_dtype: Any = None, **kw: Any) -> None:
        if name == "blk.0.attn_v.weight":  # ternary weights (TQ2_0): gguf can write them, qkv-tui does not read them
            values = gguf.quants.dequantize(tensor, raw_dtype)
            tensor, raw_dtype = gguf.quants.quantize(values, gguf.GGMLQuantizationType.TQ2_0), gguf.GGMLQuantizationType.TQ2_0
        original(self, name, tensor, raw_shape=raw_shape, raw_dtype=raw_dtype, **kw)

    gguf.GGUFWriter.add_tensor = tq2  # type: ignore[method-assign]
    try:
        write_gguf(tmp_path / "m.gguf", model, "llama", tok, "F16")
    finally:
        gguf.GGUFWriter.add_tensor = original  # type: ignore[method-assign]
    one_error(cli, tmp_path, "m.gguf", "tensor 'blk.0.attn_v.weight' is TQ2_0, which qkv-tui does not read; expected one of: F32, F16")


def test_an_ollama_blob_named_by_its_path_is_read_by_its_magic(tmp_path: Path, good: bytes) -> None:
    blob = tmp_path / ("sha256-" + "ab" * 32)
    blob.write_bytes(good)
    doc = expand_model({"model": {"source": str(blob), "text": "Alice"}})
    assert doc["tokens"][0] == "<s>"


def test_gguf_is_imported_only_when_a_gguf_is_opened(tmp_path: Path, good: bytes) -> None:
    (tmp_path / "m.gguf").write_bytes(good)
    code = (
        "import sys\n"
        "from qkv_tui import load_scenario\n"
        "load_scenario('glassllm_previous_word')\n"
        "before = [m for m in ('gguf', 'huggingface_hub') if m in sys.modules]\n"
        "from qkv_tui.importers import expand_model\n"
        f"expand_model({{'model': {{'source': {str(tmp_path / 'm.gguf')!r}, 'text': 'Alice'}}}})\n"
        "print(before, 'gguf' in sys.modules, 'huggingface_hub' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[0] == "[] True False"
