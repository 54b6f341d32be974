"""Model sources by name, found on this machine only: ``hf:ORG/NAME`` and ``ollama:NAME[:TAG]``.

- ``hf:ORG/NAME`` is the model's snapshot in the local Hugging Face cache, found by huggingface_hub
  with ``local_files_only`` (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
  ``~/.cache/huggingface/hub``): a folder with config.json opens as a Hugging Face folder, one with
  a single ``.gguf`` as that file (``hf:ORG/NAME/FILE.gguf`` picks one of several). Nothing is ever
  downloaded: a model not in the cache is an error line that says where it looked and how to fetch it.
- ``ollama:NAME[:TAG]`` is the GGUF blob an Ollama manifest names as its model layer
  (``$OLLAMA_MODELS``, default ``~/.ollama/models``: ``manifests/registry.ollama.ai/library/NAME/TAG``
  and ``blobs/sha256-…``). NAME may carry a namespace (``user/name``) or a host (``hf.co/org/name``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError, missing_package
from qkv_tui.importers.files import read_limited, status
from qkv_tui.importers.gguf_file import open_gguf
from qkv_tui.importers.hf_folder import open_folder
from qkv_tui.importers.stack import Model

HF_PREFIX, OLLAMA_PREFIX = "hf:", "ollama:"
PREFIXES = (HF_PREFIX, OLLAMA_PREFIX)
MODEL_LAYER = "application/vnd.ollama.image.model"  # the GGUF blob; other layers are the template, params, license
MANIFEST_LIMIT = 1 * 2**20  # an Ollama manifest is a few hundred bytes of JSON
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})")


def open_named(source: str) -> Model:
    """The model a ``hf:`` or ``ollama:`` source names (the caller has checked the prefix)."""
    if source.startswith(HF_PREFIX):
        return _open_hf(source)
    return _open_ollama(source)


# --- hf: --------------------------------------------------------------------------------


def hub_cache() -> Path:
    """Where huggingface_hub keeps its cache, read from the environment now (its constants are read once, at import)."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.path.expandvars(os.environ[variable])).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.path.expandvars(os.environ["HF_HOME"])).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _open_hf(source: str) -> Model:
    shown = _show(source)
    parts = source[len(HF_PREFIX):].split("/")
    if len(parts) < 2 or not all(_PART.fullmatch(p) for p in parts) or any(".." in p for p in parts):
        raise ImporterError(f"model.source {shown}: expected hf:ORG/NAME (a Hugging Face model id), or hf:ORG/NAME/FILE.gguf")
    repo_id, inside = "/".join(parts[:2]), parts[2:]
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import IncompleteSnapshotError, LocalEntryNotFoundError
    except ImportError:
        raise ImporterError(missing_package("huggingface_hub", f"model.source {shown}")) from None
    cache = hub_cache()
    ref = cache / f"models--{parts[0]}--{parts[1]}" / "refs" / "main"
    if status(ref) is not None and not os.path.isfile(ref):  # a FIFO there would block huggingface_hub's plain open()
        raise ImporterError(f"model.source {shown}: {ref} is not a regular file; expected the cache's refs/main")
    miss = (f"model.source {shown} is not in the Hugging Face cache (looked in {cache}); nothing is downloaded:"
            f" fetch it first with `hf download {repo_id}`, or set HF_HUB_CACHE to the cache that holds it")
    try:
        folder = Path(snapshot_download(repo_id, cache_dir=str(cache), local_files_only=True))
    except IncompleteSnapshotError as exc:  # some files of the repo only (one .gguf of several): use what is there
        partial = getattr(exc, "snapshot_path", None)
        if not partial:
            raise ImporterError(miss) from None
        folder = Path(partial)
    except LocalEntryNotFoundError:
        raise ImporterError(miss) from None
    except (OSError, ValueError) as exc:  # an unreadable cache, or a name huggingface_hub refuses
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
        raise ImporterError(f"model.source {shown}: the Hugging Face cache cannot be read ({reason})") from None
    if inside:
        target = folder.joinpath(*inside)
        if status(target) is None:
            raise ImporterError(f"model.source {shown}: the cached snapshot of {repo_id} has no {'/'.join(inside)};"
                                f" fetch it with `hf download {repo_id} {'/'.join(inside)}`")
        return open_gguf(target, source) if target.suffix.lower() == ".gguf" else open_folder(target, source)
    if status(folder / "config.json") is not None:
        return open_folder(folder, source)
    ggufs = sorted(p.name for p in folder.glob("*.gguf"))
    if len(ggufs) == 1:
        return open_gguf(folder / ggufs[0], source)
    if ggufs:
        listed = ", ".join(ggufs[:4]) + (", …" if len(ggufs) > 4 else "")
        raise ImporterError(f"model.source {shown} holds {len(ggufs)} GGUF files ({listed}); expected one: name it,"
                            f" hf:{repo_id}/{ggufs[0]}")
    raise ImporterError(f"model.source {shown}: the cached snapshot of {repo_id} has neither config.json nor a .gguf file;"
                        f" fetch them with `hf download {repo_id}`")


# --- ollama: ----------------------------------------------------------------------------


def ollama_models() -> Path:
    given = os.environ.get("OLLAMA_MODELS")
    return Path(given).expanduser() if given else Path.home() / ".ollama" / "models"


def _open_ollama(source: str) -> Model:
    shown = _show(source)
    name = source[len(OLLAMA_PREFIX):]
    model, colon, tag = name.partition(":")
    tag = tag if colon else "latest"
    parts = model.split("/")
    if not 1 <= len(parts) <= 3 or not all(_PART.fullmatch(p) for p in [*parts, tag]) or ".." in name:
        raise ImporterError(f"model.source {shown}: expected ollama:NAME or ollama:NAME:TAG, as `ollama list` shows them")
    full = {1: ["registry.ollama.ai", "library"], 2: ["registry.ollama.ai"], 3: []}[len(parts)] + parts
    root = ollama_models()
    manifest_path = root.joinpath("manifests", *full, tag)
    if status(manifest_path) is None:
        known = _local_names(root)
        also = f"; the models here: {', '.join(known[:6])}" if known else ""
        raise ImporterError(f"model.source {shown} is not among Ollama's local models (no manifest {manifest_path});"
                            f" expected a model fetched with `ollama pull {model}:{tag}` (OLLAMA_MODELS says where"
                            f" they live){also}")
    raw = read_limited(manifest_path, "an Ollama manifest", MANIFEST_LIMIT)
    not_ollama = (f"model.source {shown}: the manifest {manifest_path.name} is not Ollama's JSON"
                  " (expected an object with a list of layers)")
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except RecursionError:  # a megabyte of "[" nests past the interpreter's stack
        raise ImporterError(f"{not_ollama[:-1]}; it nests deeper than the parser follows)") from None
    except (UnicodeDecodeError, ValueError):
        raise ImporterError(not_ollama) from None
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    if not isinstance(layers, list):
        raise ImporterError(not_ollama)
    for i, layer in enumerate(layers):
        # each layer is {"mediaType": "application/vnd.ollama.image.…", "digest": …}; anything else is not a manifest
        kind = layer.get("mediaType") if isinstance(layer, dict) else None
        if not isinstance(kind, str):
            what = f"layers[{i}] is {_json_kind(layer)}" if not isinstance(layer, dict) else \
                f"layers[{i}].mediaType is {_json_kind(kind) if 'mediaType' in layer else 'missing'}"
            raise ImporterError(f"model.source {shown}: the manifest {manifest_path.name}'s {what}; expected an object"
                                f" whose mediaType is a string such as {MODEL_LAYER!r}")
    kinds = [layer["mediaType"] for layer in layers]
    if any(k.endswith(".adapter") for k in kinds):
        raise ImporterError(f"model.source {shown} adds a LoRA adapter to its model; not supported"
                            " (the base model's weights only)")
    models = [layer for layer in layers if layer["mediaType"] == MODEL_LAYER]
    if len(models) != 1:
        raise ImporterError(f"model.source {shown}: the manifest names {len(models)} model layers; expected one GGUF blob")
    given = models[0].get("digest")
    digest = _DIGEST.fullmatch(given) if isinstance(given, str) else None
    if digest is None:
        said = _show(given) if isinstance(given, str) else _json_kind(given)  # a list is named, never printed whole
        raise ImporterError(f"model.source {shown}: the manifest's model digest {said} is not sha256:<64 hex digits>")
    for spelling in (f"sha256-{digest.group(1)}", f"sha256:{digest.group(1)}"):  # Ollama's names, newer and older
        blob = root / "blobs" / spelling
        if status(blob) is not None:
            return open_gguf(blob, source)
    raise ImporterError(f"model.source {shown}: the manifest names blob sha256-{digest.group(1)[:12]}…, which is not in"
                        f" {root / 'blobs'} (an interrupted pull?); expected `ollama pull {model}:{tag}` to finish")


def _json_kind(value: object) -> str:
    """What a JSON value is, as a message names it (``null`` where Python would say None)."""
    if value is None:
        return "null"
    return "an object" if isinstance(value, dict) else _kind(value)


def _local_names(root: Path) -> list[str]:
    """The models Ollama's manifests name, as `ollama list` writes them (a bounded walk)."""
    names: list[str] = []
    base = root / "manifests" / "registry.ollama.ai"
    try:
        for ns in sorted(base.iterdir())[:50]:
            for model in sorted(ns.iterdir())[:50]:
                for tag in sorted(model.iterdir())[:20]:
                    prefix = "" if ns.name == "library" else ns.name + "/"
                    names.append(f"{prefix}{model.name}:{tag.name}")
    except OSError:
        pass
    return names
