"""An Ollama manifest of any JSON shape is one error line or a model, never an AttributeError.

A manifest's layers are objects whose ``mediaType`` is a string; a fuzzer wrote integers, nulls and
lists there (and lists for the layers, strings for the layer objects), which reached ``str.endswith``
on a non-string. The shapes are drawn by hypothesis around a real manifest's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkv_tui.importers import ImporterError, expand_model

from .model_fixtures import one_error

MODEL = "application/vnd.ollama.image.model"
NAME = ["registry.ollama.ai", "library", "tiny"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
# a layer near a real one: its mediaType (and digest) replaced by any JSON value, or the layer itself by one
layers = st.one_of(
    st.builds(lambda kind, digest: {"mediaType": kind, "digest": digest}, json_values | st.just(MODEL), json_values),
    json_values,
)
manifests = st.one_of(
    st.builds(lambda ls: {"schemaVersion": 2, "layers": ls}, st.lists(layers, max_size=3)),
    st.builds(lambda ls: {"schemaVersion": 2, "layers": ls}, json_values),
    json_values,
)


def write_manifest(root: Path, tag: str, manifest: Any) -> None:
    path = root.joinpath("manifests", *NAME, tag)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest), encoding="utf-8")


@pytest.mark.parametrize("kind", [3, None, ["application/vnd.ollama.image.model"], {"a": 1}, True])
def test_a_media_type_that_is_not_a_string_is_one_line(cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path, kind: Any) -> None:
    root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    write_manifest(root, "odd", {"schemaVersion": 2, "layers": [
        {"mediaType": MODEL, "digest": "sha256:" + "e" * 64}, {"mediaType": kind, "digest": "sha256:" + "1" * 64}]})
    err = one_error(cli, tmp_path, "ollama:tiny:odd", "the manifest odd's layers[1].mediaType is ")
    assert "expected an object whose mediaType is a string such as 'application/vnd.ollama.image.model'" in err


def test_a_layer_that_is_not_an_object_and_a_digest_that_is_a_list(cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    write_manifest(root, "str", {"layers": ["application/vnd.ollama.image.model"]})
    one_error(cli, tmp_path, "ollama:tiny:str", "layers[0] is a string ('application/vnd.ollama.image.model'); expected an object")
    write_manifest(root, "nomedia", {"layers": [{"digest": "sha256:" + "e" * 64}]})
    one_error(cli, tmp_path, "ollama:tiny:nomedia", "layers[0].mediaType is missing; expected an object")
    write_manifest(root, "list", {"layers": [{"mediaType": MODEL, "digest": list(range(50_000))}]})
    err = one_error(cli, tmp_path, "ollama:tiny:list", "the manifest's model digest a list is not sha256:<64 hex digits>")
    assert len(err) < 400  # the list is named, not printed
    write_manifest(root, "top", [1, 2])
    one_error(cli, tmp_path, "ollama:tiny:top", "the manifest top is not Ollama's JSON (expected an object with a list of layers)")


@given(manifest=manifests)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_any_manifest_shape_is_an_importer_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, manifest: Any) -> None:
    root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    write_manifest(root, "fuzz", manifest)
    with pytest.raises(ImporterError) as caught:  # no blob exists, so no shape can open a model
        expand_model({"model": {"source": "ollama:tiny:fuzz", "text": "Alice"}})
    message = str(caught.value)
    assert "\n" not in message and message.startswith("model.source 'ollama:tiny:fuzz'"), message
