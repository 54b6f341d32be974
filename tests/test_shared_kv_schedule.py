"""Cross-layer KV sharing in a model's layer schedule: an entry ending " kv-from L" (Gemma 3n's shared layers)
is checked, shown (R in the schedule line), said by Input.kv_source_layer, and counted as no cache of its own
(kind "shared", 0 bytes) by the KV cache count, in the JSON of --export cost too; the other layers' figures are
worked out here from the heads' shapes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from qkv_tui.core.cost import kv_cache
from qkv_tui.core.layer_schedule import schedule_line
from qkv_tui.core.scenario import parse_scenario

from .conftest import BASE, HEAD

GEMMA3N_LIKE = ["sliding 512", "full", "sliding 512", "full", "sliding 512 kv-from 2", "full kv-from 3"]


def _residual(schedule: list[str], layer: int = 1) -> str:
    return BASE + f'[input]\nkind = "residual"\nlayer = {layer}\nschedule = {json.dumps(schedule)}\n' + HEAD


@pytest.mark.parametrize(("schedule", "chosen", "line"), [
    (GEMMA3N_LIKE, 1, "layers: 0 S · [1 F] · 2 S · 3 F · 4 SR · 5 FR (S sliding 512, F full, R reuses an earlier"
                      " layer's K and V)"),
    (["full"] * 3 + ["full kv-from 2"] * 3, 0, "layers: [0 F] · 1–2 F · 3–5 FR (F full, R reuses an earlier layer's K"
                                                 " and V)"),
    (["full no-rope", "full no-rope kv-from 0"], 1, "layers: 0 N · [1 NR] (N no RoPE, R reuses an earlier layer's K and V)"),
])
def test_the_schedule_line_marks_the_layers_that_reuse_k_and_v(schedule: list[str], chosen: int, line: str) -> None:
    assert schedule_line(schedule, chosen) == line


@pytest.mark.parametrize(("layer", "source"), [(1, None), (4, 2), (5, 3)])
def test_the_input_says_which_layer_the_chosen_one_reads_k_and_v_from(layer: int, source: int | None) -> None:
    sc = parse_scenario(_residual(GEMMA3N_LIKE, layer), "case.toml")
    assert sc.input.kv_source_layer == source


@pytest.mark.parametrize(("schedule", "expected"), [
    (["full", "full kv-from 1"], "[input] schedule[1] = 'full kv-from 1'; expected kv-from to name an earlier layer"),
    (["full", "full kv-from 2", "full"], "[input] schedule[1] = 'full kv-from 2'; expected kv-from to name an earlier"),
    (["full", "full kv-from 0", "full kv-from 1"], "[input] schedule[2] = 'full kv-from 1'; expected kv-from to name an"
                                                   " earlier layer that computes its own K and V"),
    (["full", "linear kv-from 0"], "a linear layer keeps a state, not K and V another layer could reuse"),
    (["full", "full kv-from x"], "expected ' kv-from L' to name a layer L, a whole number"),
    (["full", "full kv-from 01"], "expected ' kv-from L' to name a layer L, a whole number"),
    (["full", "kv-from 0 full"], "expected 'full', 'sliding W'"),
])
def test_a_bad_kv_from_is_one_line(cli: Any, write: Any, schedule: list[str], expected: str) -> None:
    run = cli("--check", str(write(_residual(schedule))))
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1, run.err
    assert expected in run.err, run.err


def test_a_layer_that_reuses_k_and_v_caches_nothing_of_its_own(cli: Any, write: Any) -> None:
    sc = parse_scenario(_residual(GEMMA3N_LIKE, 1), "case.toml")
    kv = kv_cache(sc, 2, 100)
    per = (3 + 3) * 2  # one head of d_k 3 and d_v 3, bf16
    assert [layer.kind for layer in kv.layers] == ["sliding 512", "full", "sliding 512", "full", "shared", "shared"]
    assert [layer.per_token.value for layer in kv.layers] == [per, per, per, per, 0, 0]
    assert kv.at_context == 4 * 100 * per  # the window of 512 keeps every one of 100 tokens
    run = cli("--export", "cost", "--context", "100", str(write(_residual(GEMMA3N_LIKE, 1))))
    assert run.code == 0, run.err
    cache = json.loads(run.out)["kv_cache"]
    assert [layer["kind"] for layer in cache["layers"]][4:] == ["shared", "shared"]
    assert cache["bytes_per_token"] == 4 * per and cache["bytes_at_context"] == 4 * 100 * per


@pytest.mark.parametrize(("layer", "source"), [(1, None), (4, 2), (5, 3)])
def test_the_json_export_names_the_source_of_k_and_v(cli: Any, write: Any, layer: int, source: int | None) -> None:
    run = cli("--export", "json", str(write(_residual(GEMMA3N_LIKE, layer))))
    assert run.code == 0, run.err
    assert json.loads(run.out)["kv_source_layer"] == source


def test_a_schedule_without_sharing_leaves_the_json_as_it_was(cli: Any, write: Any) -> None:
    run = cli("--export", "json", str(write(_residual(["full", "sliding 4"], 1))))
    assert json.loads(run.out)["kv_source_layer"] is None
