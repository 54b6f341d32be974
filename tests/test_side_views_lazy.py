"""The side views at length: a step is computed when shown, few are kept, and the stage bar stays short."""

from __future__ import annotations

import numpy as np
import pytest

import qkv_tui.teach.decode as decode_module
from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.decode_view import MAX_STAGES, decode_explanation, decode_panes
from qkv_tui.teach.decode import decode
from qkv_tui.teach.paged import PagedStore, empty_table
from qkv_tui.teach.tiled import tiled, visit_tiles


def generated(n: int, heads: int = 2, window: int | None = None, seed: int = 3) -> str:
    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int) -> str:
        return "[" + ",".join("[" + ",".join(map(str, r)) + "]" for r in rng.integers(-2, 3, (rows, cols)).tolist()) + "]"

    mask = f'[mask]\nkind = "sliding"\nwindow = {window}' if window else 'mask = "causal"'
    tokens = ",".join(f'"t{i}"' for i in range(n))
    lines = [f"tokens = [{tokens}]", f"X = {mat(n, 6)}", mask, "[attention]", f"num_heads = {heads}"]
    lines += [f"{role} = {mat(6, heads * 3)}" for role in ("W_Q", "W_K", "W_V")]
    return "\n".join(lines) + "\n"


def test_the_first_screen_computes_a_fixed_number_of_attentions_however_many_steps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = decode_module._attend

    def counting(*args: object) -> tuple[np.ndarray, ...]:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(decode_module, "_attend", counting)
    for n in (8, 64):
        calls.clear()
        dec = decode(compute(parse_scenario(generated(n), "g.toml")), "tokens")
        decode_panes(dec, 0, 1, 3)
        decode_explanation(dec, 0, 1, 3)
        assert dec.count == n
        # the head's reference and the step (contiguous and paged; its output is the outputs so far):
        # never one per step
        assert len(calls) == 3, (n, len(calls))


def test_steps_asked_for_in_any_order_equal_a_walk_from_the_start() -> None:
    comp = compute(parse_scenario(generated(20, window=4), "g.toml"))
    walked = decode(comp, "chunked")
    jumped = decode(comp, "chunked")
    c = jumped.count
    assert c >= 8
    order = [c - 3, 3, c - 1, 0, c // 2, 3]
    for i in order:
        a, b = jumped.steps[1][i], walked.steps[1][:][i]
        for field in ("output", "paged_output", "weights", "K_cache", "reference"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), (i, field)
        assert (a.kv_computed, a.kv_reused, a.first, a.evicted) == (b.kv_computed, b.kv_reused, b.first, b.evicted)
        # the stacked outputs so far are each step's own output, bit for bit
        assert np.array_equal(jumped.outputs(1, i), np.concatenate([s.output for s in walked.steps[1][: i + 1]]))
    assert jumped.rows_computed(1, c - 1) == sum(s.kv_computed for s in walked.steps[1])
    assert jumped.rows_reused(0, c - 1) == sum(s.kv_reused for s in walked.steps[0])


def test_only_a_few_steps_are_kept() -> None:
    dec = decode(compute(parse_scenario(generated(40), "g.toml")), "tokens")
    assert [s.index for s in dec.steps[0]] == list(range(40)) and len(dec.steps[0]) == 40
    assert all(dec.steps[0][i] is dec.steps[0][i] for i in range(40))  # asked twice in a row: kept
    assert dec.steps[0][-1] is dec.steps[0][39]
    first = dec.steps[0][0]
    for i in range(1, 40):
        dec.steps[0][i]
    assert dec.steps[0][0] is not first  # long gone: recomputed, to the same numbers
    assert np.array_equal(dec.steps[0][0].output, first.output)


def test_the_stage_bar_names_the_first_last_and_neighbouring_steps_of_a_long_decode() -> None:
    dec = decode(compute(parse_scenario(generated(30), "g.toml")), "prefill")
    assert dec.count > MAX_STAGES
    for index in (0, 1, 5, dec.count - 2, dec.count - 1):
        stages = decode_explanation(dec, index, 0, 3).stages
        labels = [label for label, _ in stages]
        assert len(stages) <= 7
        assert labels[0].startswith("1 ") and labels[-1].startswith(f"{dec.count} ")
        assert [label for label, state in stages if state == "current"] == [
            next(label for label in labels if label.split()[0] == str(index + 1))]
        numbers = [int(label.split()[0]) for label in labels if label != "…"]
        assert numbers == sorted(numbers)
        # … stands exactly where steps are left out
        for k in range(1, len(labels)):
            if labels[k] == "…":
                assert int(labels[k + 1].split()[0]) > int(labels[k - 1].split()[0]) + 1
            elif labels[k - 1] != "…":
                assert int(labels[k].split()[0]) == int(labels[k - 1].split()[0]) + 1
        states = [state for _, state in stages]
        assert states == sorted(states, key=["done", "current", "todo"].index)


def test_a_short_decode_names_every_step() -> None:
    dec = decode(compute(parse_scenario(generated(5), "g.toml")), "tokens")
    stages = decode_explanation(dec, 2, 0, 3).stages
    assert [label for label, _ in stages] == ["1 t0", "2 t1", "3 t2", "4 t3", "5 t4"]
    assert [state for _, state in stages] == ["done", "done", "current", "todo", "todo"]


def test_reading_a_freed_block_is_refused() -> None:
    table, _ = empty_table(2, (0, 1, 2, 3)).grow(6)
    table, freed = table.release(4)
    assert freed == (0, 1)
    store = PagedStore(4, 2, 1, 1)
    store.write_rows(table, 4, np.array([[4.0], [5.0]]), np.array([[40.0], [50.0]]))
    K, V = store.gather(table, 6, 4)
    assert K.ravel().tolist() == [4.0, 5.0] and V.ravel().tolist() == [40.0, 50.0]
    with pytest.raises(ValueError):
        store.gather(table, 6, 3)


def test_the_final_state_without_kept_visits_is_the_walk_with_them() -> None:
    comp = compute(parse_scenario(generated(13), "g.toml"))
    th = tiled(comp, 1, 3)
    hr = comp.heads[1]
    visits, end = visit_tiles(hr.Q_used, hr.K_used, hr.V, comp.scenario.allow, hr.scale, range(13), th.tiles)
    assert len(visits) == len(th.tiles)
    for got, want in zip(th.finals, (end.m, end.ell, end.O_acc, end.out)):
        assert np.array_equal(got, want)
    assert th.matches
