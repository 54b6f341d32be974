"""Gemma 3n's layers that reuse an earlier layer's K and V, opened as [shared_kv] scenarios, against transformers.

The tiny Gemma3nForCausalLM of test_importers_gemma3n.py (6 layers, sliding and full alternating, the last 2
reusing the K and V layers 2 and 3 store). Through a [model] table, layers 4 and 5 open with W_Q alone and a
[shared_kv] table; the K and V it gives must be the tensors transformers hands the layer (``shared_kv_states``:
the source layer's K after k_norm and RoPE, V after v_norm), and every head's output and the output after o_proj
must match hooks in the float64 eager forward (float32's tolerance: see that module).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui.core.cost import kv_cache
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.variants import shared_kv
from qkv_tui.edges.export_json import to_json
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.teach.trace import Trace

from .hooked_forward import catch_o_proj, forward_hooked
from .test_importers_families import TEXT, _ids, _linear, _open
from .test_importers_gemma3n import FLOAT32, built  # noqa: F401  (the module's fixture: the saved model)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _reference(model: Any, layer: int, ids: list[int]) -> dict[str, Any]:
    """The layer's normed input, the K and V handed to it, its heads side by side (o_proj's input) and o_proj's
    output, from hooks in the eager forward."""
    seen: dict[str, Any] = {}
    att = model.model.layers[layer].self_attn

    def before_attention(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        seen["X"] = kwargs["hidden_states"][0].detach().numpy().copy()
        keys, values = kwargs["shared_kv_states"][att.layer_type]  # (1, kv heads, n, head_dim) each
        seen["K"], seen["V"] = keys[0].detach().numpy().copy(), values[0].detach().numpy().copy()

    forward_hooked(model, ids, [att.register_forward_pre_hook(before_attention, with_kwargs=True),
                                *catch_o_proj(att.o_proj, seen)])
    return seen


@pytest.mark.parametrize(("layer", "source"), [(4, 2), (5, 3)])
def test_a_sharing_layer_opens_and_matches_the_eager_forward(built: tuple[Path, Any], tmp_path: Path,  # noqa: F811
                                                             layer: int, source: int) -> None:
    folder, model = built
    att = model.model.layers[layer].self_attn
    assert att.is_kv_shared_layer and not hasattr(att, "k_proj")  # transformers gives this layer no K/V weights
    comp = _open(tmp_path, folder, layer)
    sc = comp.scenario
    ref = _reference(model, layer, _ids(sc.description))
    np.testing.assert_allclose(sc.X, ref["X"], rtol=FLOAT32, atol=FLOAT32)
    table = shared_kv.TABLE.of(sc)
    assert table is not None and table.source_layer == source
    assert len(table.K) == len(table.V) == 2  # one per K/V head
    for g in range(2):  # the very tensors transformers hands the layer
        np.testing.assert_allclose(table.K[g], ref["K"][g], rtol=FLOAT32, atol=FLOAT32)
        np.testing.assert_allclose(table.V[g], ref["V"][g], rtol=FLOAT32, atol=FLOAT32)
    q = _linear(att.q_proj.weight)
    d = comp.heads[0].d_k
    for h, head in enumerate(comp.heads):
        assert head.kv_head == h // 2
        np.testing.assert_array_equal(head.W_Q, q[:, h * d:(h + 1) * d])
        np.testing.assert_array_equal(head.K, table.K[h // 2])
        np.testing.assert_allclose(head.output, ref["merged"][:, h * d:(h + 1) * d], rtol=FLOAT32, atol=FLOAT32)
    np.testing.assert_allclose(comp.output, ref["attn"], rtol=FLOAT32, atol=FLOAT32)
    assert sc.input.kind == "altup" and sc.input.layer == layer and sc.input.kv_source_layer == source
    assert np.abs(ref["merged"]).max() > 0.1  # something to compare

    doc = json.loads(to_json(comp))
    assert doc["kv_source_layer"] == source
    assert all(h["W_K"] is None and h["W_V"] is None for h in doc["heads"])
    cache = kv_cache(sc, 2, 10)  # the schedule's layers 4 and 5 store nothing of their own
    assert [lc.per_token.value for lc in cache.layers] == [64, 64, 64, 64, 0, 0]

    trace = Trace(comp)
    assert "reuse" in trace.stage_keys
    targets = {(s.stage, s.target) for s in trace.segments}
    assert ("project", "K") not in targets and ("reuse", "K") in targets and ("qk_norm", "K_norm") not in targets
    assert ("rotate", "K_rot") not in targets and ("rotate", "Q_rot") in targets


def test_a_sharing_layer_written_back_loads_to_the_same_numbers(built: tuple[Path, Any],  # noqa: F811
                                                                tmp_path: Path) -> None:
    folder, _ = built
    comp = _open(tmp_path, folder, 5)
    text = to_toml(comp.scenario)
    assert "W_K" not in text and "[shared_kv]" in text
    from qkv_tui import compute

    again = compute(parse_scenario(text, "again.toml"))
    np.testing.assert_array_equal(again.output, comp.output)


def test_one_head_of_a_sharing_layer(built: tuple[Path, Any], tmp_path: Path) -> None:  # noqa: F811
    """model.heads picks query head 3 (K/V head 1): [[heads]] with W_Q alone, and K and V for K/V heads 0 and 1."""
    folder, model = built
    path = tmp_path / "one.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nlayer = 4\nheads = [3]\n', encoding="utf-8")
    from qkv_tui import compute

    comp = compute(parse_scenario(path.read_text(encoding="utf-8"), str(path)))
    ref = _reference(model, 4, _ids(comp.scenario.description))
    d = comp.heads[0].d_k
    np.testing.assert_allclose(comp.heads[0].output, ref["merged"][:, 3 * d:4 * d], rtol=FLOAT32, atol=FLOAT32)


def test_the_heads_view_walks_onto_a_sharing_layer_in_any_order(built: tuple[Path, Any]) -> None:  # noqa: F811
    """The heads view's [ and ] (importers/layer_walk.py): layer 5, then 4, then 5 again, each with the K and V its
    source layer stored on the text, as a fresh walk gives them."""
    from qkv_tui.importers.layer_walk import LayerWalk

    folder, _ = built
    doc = {"model": {"source": str(folder), "text": TEXT}}
    walk = LayerWalk(doc, None)
    for layer, source in ((5, 3), (4, 2), (5, 3)):
        data = walk.data(layer)
        assert data["shared_kv"]["source_layer"] == source and "W_K" not in data["attention"]
        fresh = LayerWalk(doc, None).data(layer)["shared_kv"]
        for g in range(2):
            np.testing.assert_array_equal(data["shared_kv"]["K"][g], fresh["K"][g])
            np.testing.assert_array_equal(data["shared_kv"]["V"][g], fresh["V"][g])
