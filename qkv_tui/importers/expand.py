"""A ``[model]`` table (docs/real-models.md) expanded into plain scenario data: the dict a TOML file would parse to.

The result uses only scenario-file keys (docs/scenario-format.md), so the loader validates it like
any file and every later stage (engine, trace, app, exports) sees an ordinary scenario. Its matrices
(X, W_Q, W_K, W_V, W_O) are read-only float64 NumPy arrays rather than lists: a head of a real model
holds hundreds of thousands of numbers, and the loader takes an array as it takes a file's large
grid, checking only that every number is finite, instead of turning each into a Python float twice. ``[input]``
says what X is: the residual stream entering the layer from layer 1 on, token plus position
embeddings at GPT-2's layer 0, plain embeddings (no table) otherwise. The heads:
- every head of the layer: ``[attention]`` in the model's own wide matrices (num_heads,
  num_kv_heads, W_Q/W_K/W_V and biases) and ``[output]`` W_O (and b_O);
- a chosen subset: one ``[[heads]]`` table per head, in the order asked, each with its
  W_Q/W_K/W_V column slices and ``kv_head``, the model's K/V head index (heads that share a
  K/V head carry the same K/V slices); no W_O, since the other heads' outputs would be missing.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from qkv_tui.base.values import escaped
from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.gguf_file import is_gguf, open_gguf
from qkv_tui.importers.glass import PREFIX as GLASS_PREFIX
from qkv_tui.importers.glass import open_glassllm
from qkv_tui.importers.hf_deepseek import mla_table, only_every_head
from qkv_tui.importers.hf_folder import open_folder
from qkv_tui.importers.hf_gated_deltanet import deltanet_table, only_every_head_dn
from qkv_tui.importers.hub import PREFIXES as NAMED_PREFIXES
from qkv_tui.importers.hub import open_named
from qkv_tui.importers.stack import Array, Layer, Model, residual_stream

MODEL_KEYS = ("source", "text", "layer", "heads")
LayerInput = Callable[[Model, list[int], int], Array]  # (model, token ids, layer) -> X entering that layer
BESIDE_MODEL = ("title", "description", "model")


def expand_model(doc: dict[str, Any], base: Path | None = None, opened: Model | None = None,
                 layer_input: LayerInput | None = None) -> dict[str, Any]:
    """The scenario ``doc`` (a parsed TOML file with a ``[model]`` table) stands for, as plain data.

    ``base`` is the scenario file's folder: a relative model folder is found from there. ``opened`` and
    ``layer_input`` let the heads view walk the layers (importers/layer_walk.py): the model opened once,
    each layer's input computed once from the one below. Raises ImporterError with a one-line message.
    """
    for key in doc:
        if key in MODEL_KEYS:  # TOML puts keys above the first header at the top level
            raise ImporterError(f"{_show(key)} belongs in the [model] table; write it below the [model] header")
        if key == "backward":  # the model's numbers are not the file's to train: a plain copy of them is
            raise ImporterError(
                "[backward] cannot sit beside [model]: write the layer out as a plain scenario first"
                " (qkv-tui --export toml FILE > layer.toml, without [backward]), then add [backward] to that file"
            )
        if key not in BESIDE_MODEL:
            raise ImporterError(
                f"{_show(key)} cannot sit beside [model]: the model gives tokens, X, [norm], [rope], the heads, [output]"
                " and mask; only title and description may be written beside it"
            )
    table = doc["model"]
    if not isinstance(table, dict):
        raise ImporterError("model must be a table ([model]) with source and text")
    _known(table)
    source = _string(table, "source", 'a model: "glassllm:en", "glassllm:pt" or a Hugging Face model folder')
    text = _string(table, "text", "the sentence to run through the model")
    if not text.strip():
        raise ImporterError("model.text is empty; expected a sentence to run through the model")
    model = open_source(source, base) if opened is None else opened
    layer = _layer(table, model)
    heads = _heads(table, model)

    labels, ids = model.tokenize(text)
    if not ids:
        raise ImporterError(f"model.text {_show(text)} gives no tokens; expected a sentence the tokenizer can read")
    if len(ids) > model.context:
        raise ImporterError(
            f"model.text is {len(ids)} tokens long but {model.name} takes at most {model.context}; expected a shorter text"
        )
    if layer_input is not None:
        X = layer_input(model, ids, layer)  # (n, d_model)
    elif model.stream is not None:
        X = model.stream(ids, layer)  # (n, d_model), already normed
    else:
        # one earlier layer at a time, each read when it runs and dropped after: a deep layer never holds them all
        X = residual_stream(model.embed(ids), (model.layer(i) for i in range(layer)), model.rope)  # (n, d_model)
    weights = model.layer(layer)
    _check_shapes(weights, model, X.shape[1])

    result: dict[str, Any] = {key: doc[key] for key in ("title",) if key in doc}
    result["description"] = _description(doc.get("description"), model, layer, heads, text, ids)
    result["tokens"] = labels
    result["X"] = _matrix(X)
    if model.stream is not None:  # Gemma 3n: the normed AltUp prediction its attention reads
        result["input"] = {"kind": "altup", "layer": layer}
    elif layer > 0:  # what X is, for the trace, the panes and the exports (core/inputs.py)
        result["input"] = {"kind": "residual", "layer": layer}
    elif weights.post_norm:  # BERT: token, position and token-type embeddings, summed and normed
        result["input"] = {"kind": "embedding+position+type"}
    elif model.rope is None and not model.positionless:  # GPT-2: learned position embeddings are added to the token embeddings
        result["input"] = {"kind": "embedding+position"}
    if model.schedule:  # every layer's attention, the chosen one marked where the scenario is shown
        result.setdefault("input", {})["schedule"] = list(model.schedule)
    if not weights.post_norm and not weights.norm_after and model.stream is None:  # BERT's, OLMo 2's, Gemma 3n's
        # attention reads X as it is (Gemma 3n's X is already normed)
        norm = weights.norm
        result["norm"] = {"kind": norm.kind, "gamma": norm.gamma.tolist(), "eps": norm.eps}
        if norm.beta is not None:
            result["norm"]["beta"] = norm.beta.tolist()
    if weights.qk_norm is not None:
        result["qk_norm"] = _qk_norm(weights, heads == list(range(model.num_heads)), model.name)
    rope = weights.rope if weights.rope is not None else model.rope
    if rope is not None and weights.rotary:
        result["rope"] = {"layout": rope.layout, "base": rope.base, "positions": list(range(len(ids)))}
        if rope.partial != 1.0:
            result["rope"]["partial"] = rope.partial
        if rope.scaling is not None:
            result["rope"]["scaling"] = dict(rope.scaling)
    if weights.scale is not None:
        result["scale"] = weights.scale
        if weights.scale_from is not None:
            result["scale_from"] = weights.scale_from
    if weights.softcap is not None:
        result["softcap"] = weights.softcap
    if weights.value_scale != 1.0:  # MiMo-V2-Flash's attention_value_scale
        result["value_scale"] = {"factor": weights.value_scale}
    if weights.v_norm is not None:  # Gemma 3n's v_norm
        result["v_norm"] = {"eps": weights.v_norm}
    if not weights.causal:
        result["mask"] = "none"
    else:
        result["mask"] = "causal" if weights.window is None else {"kind": "sliding", "window": weights.window}
    if weights.mla is not None:  # DeepSeek's latent attention: one [mla] table for every head
        if heads != list(range(model.num_heads)):
            raise only_every_head(model.name)
        result["mla"] = mla_table(weights.mla)
        result["output"] = {"W_O": _matrix(weights.attention.W_O)}
    elif weights.deltanet is not None:  # a Gated DeltaNet layer: every head, the rule's weights in [deltanet]
        if "heads" in table:  # its heads are the layer's value heads, not the model's query heads
            raise only_every_head_dn(model.name)
        result.update(_all_heads(weights))
        result["deltanet"] = deltanet_table(weights.deltanet)
    elif heads == list(range(model.num_heads)):
        result.update(_all_heads(weights))
    else:
        result["heads"] = [_one_head(weights, layer, h) for h in heads]
    if weights.tables is not None:  # a part's own tables (DiffLlama's [differential]), for the chosen heads
        result.update(weights.tables(heads))
    if weights.tables_on is not None:  # a part's tables made from what the layer reads (Mamba-2's [ssd])
        result.update(weights.tables_on(weights.norm(X), heads))
    return result


def open_source(source: str, base: Path | None) -> Model:
    if source.startswith(GLASS_PREFIX):
        return open_glassllm(source[len(GLASS_PREFIX):])
    if source.startswith(NAMED_PREFIXES):  # hf:ORG/NAME, ollama:NAME[:TAG] (importers/hub.py)
        return open_named(source)
    folder = Path(source).expanduser()
    if not folder.is_absolute() and base is not None:
        folder = base / folder
    if is_gguf(folder):  # a .gguf file, or an Ollama blob named by its path
        return open_gguf(folder, source)
    return open_folder(folder, source)


def _qk_norm(weights: Layer, every_head: bool, name: str) -> dict[str, Any]:
    qkn = weights.qk_norm
    assert qkn is not None
    if qkn.over == "all" and not every_head:
        # one head's columns cannot be normed without the others': the statistics run over the whole projection
        raise ImporterError(
            f"{name}: its QK-norm runs over every head's query and key projection together ([qk_norm] over = \"all\"),"
            " so the scenario needs every head; leave out model.heads"
        )
    return {"over": qkn.over, "gamma_q": qkn.gamma_q.tolist(), "gamma_k": qkn.gamma_k.tolist(), "eps": qkn.eps}


def _all_heads(weights: Layer) -> dict[str, Any]:
    att = weights.attention
    attention: dict[str, Any] = {"num_heads": att.num_heads, "num_kv_heads": att.num_kv_heads}
    for role in ("Q", "K", "V"):
        attention[f"W_{role}"] = _matrix(getattr(att, f"W_{role}"))
        bias = getattr(att, f"b_{role}")
        if bias is not None:
            attention[f"b_{role}"] = bias.tolist()
    if weights.sinks is not None:
        attention["sinks"] = weights.sinks.tolist()
    output: dict[str, Any] = {"W_O": _matrix(att.W_O)}
    if att.b_O is not None:
        output["b_O"] = att.b_O.tolist()
    if weights.W_G is not None:  # Qwen3.5's output gate, cut like W_V's query heads
        return {"attention": attention, "output": output, "gate": {"W_G": _matrix(weights.W_G)}}
    return {"attention": attention, "output": output}


def _one_head(weights: Layer, layer: int, h: int) -> dict[str, Any]:
    att = weights.attention
    g = att.kv_head(h)
    cols = {"Q": slice(h * att.d_k, (h + 1) * att.d_k), "K": slice(g * att.d_k, (g + 1) * att.d_k),
            "V": slice(g * att.d_v, (g + 1) * att.d_v)}
    table: dict[str, Any] = {"name": f"L{layer} H{h}"}
    for role, cut in cols.items():
        table[f"W_{role}"] = _matrix(getattr(att, f"W_{role}")[:, cut])
        bias: Array | None = getattr(att, f"b_{role}")
        if bias is not None:
            table[f"b_{role}"] = bias[cut].tolist()
    table["kv_head"] = g
    if weights.sinks is not None:
        table["sink"] = float(weights.sinks[h])
    if weights.W_G is not None:
        table["W_G"] = _matrix(weights.W_G[:, h * att.d_v:(h + 1) * att.d_v])
    return table


def _matrix(values: Array) -> Array:
    """A read-only C-ordered copy: the loader keeps it as the scenario's matrix, laid out as one parsed from lists."""
    out = np.array(values, dtype=np.float64, order="C")
    out.setflags(write=False)
    return out


def _description(given: Any, model: Model, layer: int, heads: list[int], text: str, ids: list[int]) -> str:
    which = "every head"
    if heads != list(range(model.num_heads)):
        which = ("head " if len(heads) == 1 else "heads ") + ", ".join(map(str, heads))
    # the source may be a folder whose name holds a newline or an escape: shown escaped, the line stays one line
    origin = (f"{escaped(model.name)}, layer {layer}, {which} (0-based), on {text!r}: {len(ids)} tokens,"
              f" ids {' '.join(map(str, ids))}.")
    said = model.note(layer)
    if said:
        origin = f"{origin} {said}"
    if isinstance(given, str) and given.strip():
        return f"{given.rstrip()}\n\n{origin}"
    return origin


def _check_shapes(weights: Layer, model: Model, d_model: int) -> None:
    att = weights.attention
    expected = {
        "W_Q": (d_model, att.num_heads * att.d_k), "W_K": (d_model, att.num_kv_heads * att.d_k),
        "W_V": (d_model, att.num_kv_heads * att.d_v), "W_O": (att.num_heads * att.d_v, d_model),
    }
    for role, shape in expected.items():
        got = getattr(att, role).shape
        if got != shape:
            raise ImporterError(
                f"{model.name}: the layer's {role} is {got[0]}×{got[1]}; the config implies {shape[0]}×{shape[1]}"
            )


def _known(table: dict[str, Any]) -> None:
    for key in table:
        if key not in MODEL_KEYS:
            hint = difflib.get_close_matches(key, MODEL_KEYS, n=1, cutoff=0.6)
            more = f"; did you mean {hint[0]!r}?" if hint else f"; expected one of: {', '.join(MODEL_KEYS)}"
            raise ImporterError(f"unknown key {_show(key)} in [model]{more}")


def _string(table: dict[str, Any], key: str, what: str) -> str:
    if key not in table:
        raise ImporterError(f"[model] is missing {key!r}; expected {what}")
    value = table[key]
    if not isinstance(value, str):
        raise ImporterError(f"model.{key} must be a string ({what}), got {_kind(value)}")
    return value


def _index(value: Any, key: str, count: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ImporterError(f"{key} must be a whole number, got {_kind(value)}; expected 0 … {count - 1} (0-based {what})")
    if not 0 <= value < count:
        raise ImporterError(f"{key} = {_show(value)} is out of range; the model has {count} {what}s, numbered 0 … {count - 1}")
    return value


def _layer(table: dict[str, Any], model: Model) -> int:
    return _index(table.get("layer", 0), "model.layer", model.num_layers, "layer")


def _heads(table: dict[str, Any], model: Model) -> list[int]:
    if "heads" not in table:
        return list(range(model.num_heads))
    raw = table["heads"]
    if not isinstance(raw, list) or not raw:
        raise ImporterError(f"model.heads must be a non-empty list of head numbers (0 … {model.num_heads - 1}), got {_kind(raw)}")
    heads = [_index(h, f"model.heads[{i}]", model.num_heads, "head") for i, h in enumerate(raw)]
    for i, h in enumerate(heads):
        if h in heads[:i]:
            raise ImporterError(f"model.heads lists head {h} twice; expected each head at most once")
    return heads
