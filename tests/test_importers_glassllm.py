"""glassllm's packaged models: the expanded scenario reproduces glassllm's own forward pass.

The reference is glassllm itself, run with its Tracer: ``norm.attn`` is the normed input of a
layer, ``attn.mix`` each head's output, ``attn.out`` the layer's attention output after W_O.
"""

from __future__ import annotations

import glassllm
import numpy as np
import pytest

from qkv_tui.importers import ImporterError, expand_model

from .model_fixtures import evaluate_scenario_dict

TEXT = "Alice was beginning to get very tired of sitting by her sister"


def traced(lang: str, text: str) -> tuple[object, list[int]]:
    model, tok = glassllm.load_pretrained(lang)
    ids = tok.encode(text)
    tracer = glassllm.Tracer()
    with glassllm.no_grad():
        model.forward(ids, trace=tracer)
    return tracer, ids


@pytest.mark.parametrize("layer", [0, 1, 2, 3])
def test_every_head_equals_glassllms_own_attention(layer: int) -> None:
    tracer, ids = traced("en", TEXT)
    doc = expand_model({"model": {"source": "glassllm:en", "text": TEXT, "layer": layer}})
    assert doc["description"].endswith(f"ids {' '.join(map(str, ids))}.")
    assert doc["tokens"][:3] == ["Alice", "▁was", "▁begin"]
    assert doc["rope"]["layout"] == "interleaved" and doc["norm"]["eps"] == 1e-6 and doc["mask"] == "causal"
    assert (doc["attention"]["num_heads"], doc["attention"]["num_kv_heads"]) == (4, 2)
    got = evaluate_scenario_dict(doc)
    # glassllm runs in float32; the importer in float64
    for h in range(4):
        np.testing.assert_allclose(got["heads"][h], tracer.get("attn.mix", layer, h).value, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(got["output"], tracer.get("attn.out", layer).value, rtol=2e-4, atol=2e-5)
    if layer > 0:  # X is the residual stream leaving the block before
        np.testing.assert_allclose(np.array(doc["X"]), tracer.get("resid.ffn", layer - 1).value, rtol=2e-4, atol=2e-4)


def test_a_head_subset_keeps_the_models_kv_heads() -> None:
    tracer, _ = traced("pt", "O menino foi à escola ontem de manhã")
    doc = expand_model({"model": {"source": "glassllm:pt", "text": "O menino foi à escola ontem de manhã", "layer": 1, "heads": [3, 0, 2]}})
    assert [(h["name"], h["kv_head"]) for h in doc["heads"]] == [("L1 H3", 1), ("L1 H0", 0), ("L1 H2", 1)]
    assert "output" not in doc
    got = evaluate_scenario_dict(doc)
    for out, h in zip(got["heads"], [3, 0, 2], strict=True):
        np.testing.assert_allclose(out, tracer.get("attn.mix", 1, h).value, rtol=2e-4, atol=2e-5)


def test_a_newline_token_gets_a_one_line_label() -> None:
    doc = expand_model({"model": {"source": "glassllm:en", "text": "Alice\nwas"}})
    assert "\\n" in doc["tokens"] and all("\n" not in t for t in doc["tokens"])


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"model": {"source": "glassllm:fr", "text": "x"}}, "is not a glassllm model; expected one of: glassllm:pt, glassllm:en"),
        ({"model": {"source": "glassllm:en", "text": ""}}, "model.text is empty"),
        ({"model": {"source": "glassllm:en", "text": "   "}}, "model.text is empty"),
        ({"model": {"source": "glassllm:en"}}, "[model] is missing 'text'"),
        ({"model": {"text": "hi"}}, "[model] is missing 'source'"),
        ({"model": {"source": 3, "text": "hi"}}, "model.source must be a string"),
        ({"model": {"source": "glassllm:en", "text": "hi", "layer": 4}},
         "model.layer = 4 is out of range; the model has 4 layers, numbered 0 … 3"),
        ({"model": {"source": "glassllm:en", "text": "hi", "layer": -1}}, "model.layer = -1 is out of range"),
        ({"model": {"source": "glassllm:en", "text": "hi", "layer": "1"}}, "model.layer must be a whole number, got a string ('1')"),
        ({"model": {"source": "glassllm:en", "text": "hi", "heads": [4]}}, "model.heads[0] = 4 is out of range; the model has 4 heads"),
        ({"model": {"source": "glassllm:en", "text": "hi", "heads": []}}, "model.heads must be a non-empty list"),
        ({"model": {"source": "glassllm:en", "text": "hi", "heads": [1, 1]}}, "model.heads lists head 1 twice"),
        ({"model": {"source": "glassllm:en", "text": "hi", "head": [1]}}, "unknown key 'head' in [model]; did you mean 'heads'?"),
        ({"model": {"source": "glassllm:en", "text": "hi"}, "tokens": ["a"]}, "'tokens' cannot sit beside [model]"),
        ({"model": {"source": "glassllm:en", "text": "hi"}, "mask": "causal"}, "'mask' cannot sit beside [model]"),
        ({"model": {"source": "glassllm:en", "text": "hi"}, "backward": {"dO": [[1.0]]}},
         "[backward] cannot sit beside [model]: write the layer out as a plain scenario first"
         " (qkv-tui --export toml FILE > layer.toml, without [backward]), then add [backward] to that file"),
        ({"model": "glassllm:en"}, "model must be a table"),
        ({"model": {"source": "glassllm:en", "text": "hi"}, "layer": 1}, "'layer' belongs in the [model] table; write it below the [model] header"),
        ({"model": {"source": "glassllm:en", "text": "the " * 200}}, "model.text is 201 tokens long but glassllm:en takes at most 128"),
    ],
)
def test_bad_model_tables(doc: dict, needle: str) -> None:
    with pytest.raises(ImporterError) as info:
        expand_model(doc)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_a_missing_dependency_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from qkv_tui.importers.glass import open_glassllm

    open_glassllm.cache_clear()
    monkeypatch.setitem(sys.modules, "glassllm", None)  # what an uninstalled package looks like to import
    try:
        with pytest.raises(ImporterError, match=r"needs the glassllm package, which is not installed; it is one of qkv-tui's own dependencies: pip install glassllm \(or reinstall qkv-tui\)$"):
            expand_model({"model": {"source": "glassllm:en", "text": "hi"}})
    finally:
        open_glassllm.cache_clear()
