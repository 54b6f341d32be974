"""Hostile model folders, as a fuzzer builds them: each is one error line, never a traceback or a hang.

Every case builds its folder in tmp_path from a valid tiny checkpoint (tests/model_fixtures.py),
breaks one thing, and runs ``qkv-tui --check`` on a scenario file naming the folder.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.importers.hf_config import CONFIG_LIMIT

from .model_fixtures import build_gpt2, build_llama, write_safetensors


def scenario(tmp_path: Path, source: str, text: str = "Alice was reading") -> Path:
    path = tmp_path / "head.toml"
    path.write_text(f'[model]\nsource = "{source}"\ntext = "{text}"\nlayer = 1\n', encoding="utf-8")
    return path


def one_error(cli: Callable[..., object], path: Path, needle: str) -> str:
    run = cli("--check", str(path))
    assert run.code == 2 and run.out == "", run.err[:400]  # type: ignore[attr-defined]
    err: str = run.err  # type: ignore[attr-defined]
    assert err.startswith(f"error: {path}: ") and err.count("\n") == 1 and "Traceback" not in err, err[:400]
    assert needle in err, err
    return err


def rewrite_header(path: Path, change: Callable[[dict], None]) -> None:
    """Edit a safetensors file's JSON header, keeping its data bytes."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    change(header)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + length:])


def test_a_shape_that_its_bytes_cannot_hold(cli, tmp_path: Path) -> None:
    build_gpt2(tmp_path / "g")

    def grow(header: dict) -> None:
        header["transformer.h.0.attn.c_attn.weight"]["shape"] = [16, 4800]  # the bytes hold 16×48

    rewrite_header(tmp_path / "g" / "model.safetensors", grow)
    one_error(cli, scenario(tmp_path, "g"), "tensor 'transformer.h.0.attn.c_attn.weight' is F32 of shape 16×4800 (2-D),"
              " which takes 307,200 bytes, but its data_offsets hold 3,072; expected the two to agree")


def test_negative_or_fractional_dimensions(cli, tmp_path: Path) -> None:
    build_gpt2(tmp_path / "g")
    for bad in ([-16, -48], [16.0, 48], [True, 48]):
        rewrite_header(tmp_path / "g" / "model.safetensors",
                       lambda h, bad=bad: h["transformer.h.0.attn.c_attn.weight"].__setitem__("shape", bad))
        one_error(cli, scenario(tmp_path, "g"), "has a malformed header entry (expected a dtype string, and whole numbers >= 0")


def test_a_vector_where_a_matrix_belongs(cli, tmp_path: Path) -> None:
    weights = build_gpt2(tmp_path / "g")
    flat = {"transformer." + k: v for k, v in weights.items()}
    flat["transformer.h.0.attn.c_attn.weight"] = flat["transformer.h.0.attn.c_attn.weight"].reshape(-1)  # 768 numbers, 1-D
    write_safetensors(tmp_path / "g" / "model.safetensors", {k: v.astype(np.float32) for k, v in flat.items()}, "F32")
    one_error(cli, scenario(tmp_path, "g"),
              "tensor 'transformer.h.0.attn.c_attn.weight' is a vector of 768 (1-D); the config implies 16×48 (2-D)")


def test_a_matrix_of_the_wrong_width_in_a_llama(cli, tmp_path: Path) -> None:
    weights = build_llama(tmp_path / "m")
    weights["model.layers.0.self_attn.k_proj.weight"] = weights["model.layers.0.self_attn.k_proj.weight"][:, :15]
    write_safetensors(tmp_path / "m" / "model.safetensors", {k: v.astype(np.float32) for k, v in weights.items()}, "F32")
    one_error(cli, scenario(tmp_path, "m"), "tensor 'model.layers.0.self_attn.k_proj.weight' is 12×15 (2-D); the config implies 12×16")


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_token_ids_past_the_embedding_table(cli, tmp_path: Path, kind: str) -> None:
    build = build_gpt2 if kind == "gpt2" else build_llama
    weights = build(tmp_path / "m")
    key = "wte.weight" if kind == "gpt2" else "model.embed_tokens.weight"
    weights[key] = weights[key][:5]  # the tokenizer's ids go far past 5
    stored = {("transformer." + k if kind == "gpt2" else k): v.astype(np.float32) for k, v in weights.items()}
    write_safetensors(tmp_path / "m" / "model.safetensors", stored, "F32")
    err = one_error(cli, scenario(tmp_path, "m"), "has 5 rows (ids 0 … 4); expected a tokenizer.json made for these weights")
    assert "tokenizer.json gives token id " in err


def test_a_source_name_over_255_characters(cli, tmp_path: Path) -> None:
    name = "m" * 300
    err = one_error(cli, scenario(tmp_path, name), "cannot open: File name too long")
    assert len(err) < 300


def test_a_huge_config_json_is_refused_by_its_size_before_reading(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build_gpt2(tmp_path / "g")
    config = tmp_path / "g" / "config.json"
    with config.open("r+b") as handle:  # 2.5 GB, sparse: nothing is written to disk
        handle.truncate(2_500_000_000)
    reads: list[str] = []
    real_read = os.read

    def read(fd: int, n: int) -> bytes:
        reads.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", read)
    one_error(cli, scenario(tmp_path, "g"), f"config.json is 2,384 MiB; expected a config.json of at most {CONFIG_LIMIT // 2**20} MiB")
    assert reads and not any(r.endswith("config.json") for r in reads)  # the scenario file was read; config.json never


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "tokenizer.json"])
def test_a_fifo_named_like_a_model_file_is_refused_without_blocking(cli, tmp_path: Path, name: str) -> None:
    build_gpt2(tmp_path / "g")
    (tmp_path / "g" / name).unlink()
    os.mkfifo(tmp_path / "g" / name)  # opening it for a plain read would wait for a writer forever
    if name == "model.safetensors":
        needle = "model.safetensors is a named pipe (FIFO); expected a safetensors file (a regular file)"
    else:
        needle = f"{name} is a named pipe (FIFO); expected a {name} (a regular file)"
    one_error(cli, scenario(tmp_path, "g"), needle)


def test_a_second_weights_file_that_is_a_fifo(cli, tmp_path: Path) -> None:
    build_llama(tmp_path / "m")
    os.mkfifo(tmp_path / "m" / "model-00002-of-00002.safetensors")
    one_error(cli, scenario(tmp_path, "m"), "model-00002-of-00002.safetensors is a named pipe (FIFO)")


def test_a_directory_named_like_weights(cli, tmp_path: Path) -> None:
    build_gpt2(tmp_path / "g")
    (tmp_path / "g" / "extra.safetensors").mkdir()
    one_error(cli, scenario(tmp_path, "g"), "extra.safetensors is a directory; expected a safetensors file (a regular file)")


def test_a_source_that_is_a_fifo(cli, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    one_error(cli, scenario(tmp_path, "pipe"), "model.source 'pipe' is a named pipe (FIFO); expected a folder")


def test_a_header_length_past_the_end_of_the_file(cli, tmp_path: Path) -> None:
    build_gpt2(tmp_path / "g")
    path = tmp_path / "g" / "model.safetensors"
    raw = path.read_bytes()
    path.write_bytes(struct.pack("<Q", len(raw) * 10) + raw[8:])
    one_error(cli, scenario(tmp_path, "g"), "not a safetensors file (header length")


def test_a_config_json_with_a_number_of_5000_digits(cli, tmp_path: Path) -> None:
    build_gpt2(tmp_path / "g")
    config = tmp_path / "g" / "config.json"
    config.write_text(config.read_text()[:-1] + ', "n_inner": ' + "9" * 5000 + "}")
    err = one_error(cli, scenario(tmp_path, "g"), "config.json: holds an integer of more than 4,300 digits")
    assert len(err) < 400
