"""``hf:ORG/NAME`` through a local Hugging Face cache and ``ollama:NAME[:TAG]`` through Ollama's manifests.

Both trees are built under tmp_path in the layout the tools write (huggingface_hub's
``models--ORG--NAME/{refs,snapshots,blobs}``; Ollama's ``manifests/registry.ollama.ai/…`` and
``blobs/sha256-…``), and the environment variables point at them. Nothing may reach the network:
every socket connection fails during these tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui.importers import ImporterError, expand_model

from .model_fixtures import build_gpt2, one_error

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: Any, **_kw: Any) -> None:
        raise AssertionError("a hub source tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "OLLAMA_MODELS"):
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A tiny LLaMA GGUF (d_model 32), written as llama.cpp's converter writes one."""
    from .gguf_fixtures import build_hf, spm_tokenizer, write_gguf

    folder = tmp_path_factory.mktemp("tiny")
    tok = spm_tokenizer(folder)
    model = build_hf(folder, "llama", len(tok["tokens"]), d=32, head_dim=8, inter=64)
    write_gguf(folder / "m.gguf", model, "llama", tok, "Q8_0")
    return (folder / "m.gguf").read_bytes()


def cached_repo(cache: Path, repo: str, files: dict[str, bytes]) -> Path:
    """A repo in huggingface_hub's cache layout: content in blobs/, linked from snapshots/COMMIT, refs/main naming it."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (root / "blobs").mkdir()
    for name, data in files.items():
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / name).symlink_to(os.path.relpath(blob, (snapshot / name).parent))
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(COMMIT)
    return snapshot


def folder_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def expand(source: str) -> dict[str, Any]:
    """The importer's document with its arrays as lists, so two documents compare with == cell by cell."""
    return as_lists(expand_model({"model": {"source": source, "text": "Alice was reading"}}))


def as_lists(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: as_lists(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_lists(v) for v in value]
    return value


# --- hf: --------------------------------------------------------------------------------------


def test_a_cached_hugging_face_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    build_gpt2(tmp_path / "g")
    cached_repo(tmp_path / "cache", "openai-community/tiny-gpt2", folder_files(tmp_path / "g"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert expand("hf:openai-community/tiny-gpt2") == expand(str(tmp_path / "g")) | {
        "description": expand("hf:openai-community/tiny-gpt2")["description"]}
    assert expand("hf:openai-community/tiny-gpt2")["description"].startswith("hf:openai-community/tiny-gpt2, layer 0")


def test_hf_home_is_followed_when_hf_hub_cache_is_not_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    build_gpt2(tmp_path / "g")
    cached_repo(tmp_path / "home" / "hub", "org/tiny", folder_files(tmp_path / "g"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert expand("hf:org/tiny")["tokens"][0] == "Alice"


def test_a_cached_gguf_repo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gguf_bytes: bytes) -> None:
    cached_repo(tmp_path / "cache", "org/tiny-GGUF", {"tiny.Q8_0.gguf": gguf_bytes, "README.md": b"# tiny\n"})
    cached_repo(tmp_path / "cache", "org/many-GGUF", {"a.Q8_0.gguf": gguf_bytes, "b.Q8_0.gguf": gguf_bytes})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    doc = expand("hf:org/tiny-GGUF")
    assert doc["tokens"][:2] == ["<s>", "▁Alice"] and doc["rope"]["layout"] == "interleaved"
    with pytest.raises(ImporterError, match=r"holds 2 GGUF files \(a\.Q8_0\.gguf, b\.Q8_0\.gguf\); expected one: name it,"
                                            r" hf:org/many-GGUF/a\.Q8_0\.gguf"):
        expand("hf:org/many-GGUF")
    assert expand("hf:org/many-GGUF/b.Q8_0.gguf")["tokens"] == doc["tokens"]


def test_a_model_not_in_the_cache_is_one_line_saying_where_and_how(cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    err = one_error(cli, tmp_path, "hf:Qwen/Qwen2.5-0.5B", "model.source 'hf:Qwen/Qwen2.5-0.5B' is not in the Hugging Face cache")
    assert f"looked in {tmp_path / 'cache'}" in err and "nothing is downloaded" in err and "`hf download Qwen/Qwen2.5-0.5B`" in err
    one_error(cli, tmp_path, "hf:gpt2", "expected hf:ORG/NAME (a Hugging Face model id)")
    one_error(cli, tmp_path, "hf:org/../etc", "expected hf:ORG/NAME")


def test_a_cached_repo_without_model_files_and_a_missing_file(cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    cached_repo(tmp_path / "cache", "org/readme-only", {"README.md": b"# nothing\n"})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    one_error(cli, tmp_path, "hf:org/readme-only", "has neither config.json nor a .gguf file; fetch them with `hf download org/readme-only`")
    one_error(cli, tmp_path, "hf:org/readme-only/x.Q4_K_M.gguf", "has no x.Q4_K_M.gguf; fetch it with `hf download org/readme-only x.Q4_K_M.gguf`")


def test_a_fifo_in_the_cache_is_refused(cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cached_repo(tmp_path / "cache", "org/tiny", {"README.md": b""})
    ref = tmp_path / "cache" / "models--org--tiny" / "refs" / "main"
    ref.unlink()
    os.mkfifo(ref)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    one_error(cli, tmp_path, "hf:org/tiny", "is not a regular file; expected the cache's refs/main")


# --- ollama: ----------------------------------------------------------------------------------


def ollama_tree(root: Path, name: list[str], tag: str, blob: bytes, layers: list[dict[str, Any]] | None = None) -> str:
    digest = hashlib.sha256(blob).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(blob)
    manifest = root.joinpath("manifests", *name, tag)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    model = {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": len(blob)}
    manifest.write_text(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + "0" * 64, "size": 2},
        "layers": layers if layers is not None else [
            model, {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "1" * 64, "size": 10}],
    }))
    return digest


def test_an_ollama_model_by_name_and_tag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gguf_bytes: bytes) -> None:
    root = tmp_path / "ollama"
    ollama_tree(root, ["registry.ollama.ai", "library", "tiny"], "latest", gguf_bytes)
    ollama_tree(root, ["registry.ollama.ai", "someone", "tiny"], "q8", gguf_bytes)
    ollama_tree(root, ["hf.co", "org", "tiny-GGUF"], "Q8_0", gguf_bytes)
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    doc = expand("ollama:tiny")
    assert doc["tokens"][:2] == ["<s>", "▁Alice"] and doc["description"].startswith("ollama:tiny, layer 0")
    for name in ("ollama:tiny:latest", "ollama:someone/tiny:q8", "ollama:hf.co/org/tiny-GGUF:Q8_0"):
        assert expand(name)["X"] == doc["X"], name


def test_the_default_models_folder_is_under_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gguf_bytes: bytes) -> None:
    ollama_tree(tmp_path / ".ollama" / "models", ["registry.ollama.ai", "library", "tiny"], "latest", gguf_bytes)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert expand("ollama:tiny")["tokens"][0] == "<s>"


def test_an_ollama_model_not_pulled_is_one_line(cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                               gguf_bytes: bytes) -> None:
    root = tmp_path / "ollama"
    ollama_tree(root, ["registry.ollama.ai", "library", "tiny"], "latest", gguf_bytes)
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    err = one_error(cli, tmp_path, "ollama:llama3.2", "model.source 'ollama:llama3.2' is not among Ollama's local models")
    assert "`ollama pull llama3.2:latest`" in err and "the models here: tiny:latest" in err
    assert str(root / "manifests" / "registry.ollama.ai" / "library" / "llama3.2" / "latest") in err
    one_error(cli, tmp_path, "ollama:../../etc/passwd", "expected ollama:NAME or ollama:NAME:TAG")


def test_broken_ollama_manifests_are_one_line(cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                             gguf_bytes: bytes) -> None:
    root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    name = ["registry.ollama.ai", "library", "tiny"]
    digest = ollama_tree(root, name, "nolayer", gguf_bytes, layers=[])
    one_error(cli, tmp_path, "ollama:tiny:nolayer", "the manifest names 0 model layers; expected one GGUF blob")
    ollama_tree(root, name, "lora", gguf_bytes, layers=[
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"},
        {"mediaType": "application/vnd.ollama.image.adapter", "digest": f"sha256:{digest}"}])
    one_error(cli, tmp_path, "ollama:tiny:lora", "adds a LoRA adapter to its model; not supported")
    ollama_tree(root, name, "baddigest", gguf_bytes, layers=[{"mediaType": "application/vnd.ollama.image.model", "digest": "../x"}])
    one_error(cli, tmp_path, "ollama:tiny:baddigest", "is not sha256:<64 hex digits>")
    ollama_tree(root, name, "gone", gguf_bytes, layers=[{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "e" * 64}])
    one_error(cli, tmp_path, "ollama:tiny:gone", "the manifest names blob sha256-eeeeeeeeeeee…, which is not in")
    (root.joinpath("manifests", *name, "text")).write_text("not json")
    one_error(cli, tmp_path, "ollama:tiny:text", "the manifest text is not Ollama's JSON")
    os.mkfifo(root.joinpath("manifests", *name, "fifo"))
    one_error(cli, tmp_path, "ollama:tiny:fifo", "fifo is a named pipe (FIFO); expected an Ollama manifest (a regular file)")
