"""The engine against an independent loop implementation, and the invariants of attention."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings

from qkv_tui import compute, load_scenario
from qkv_tui.core.part_questions import row_total
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.ssd_part import SsdRecord
from qkv_tui.kernels.deltanet import DeltaForward
from qkv_tui.kernels.sinks import Sunk

from .conftest import SCENARIOS
from .strategies import Case, cases, reference

TOL = {"rtol": 1e-9, "atol": 1e-9}


@settings(max_examples=150, deadline=None)
@given(cases())
def test_engine_matches_reference(case: Case) -> None:
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    ref = reference(case)
    for got, want in zip(comp.heads, ref["heads"], strict=True):
        for name in ("Q", "K", "V", "scores", "weights", "output"):
            assert np.allclose(getattr(got, name), np.array(want[name]), **TOL), name
    assert np.allclose(comp.concat, np.array(ref["concat"]), **TOL)
    assert np.allclose(comp.output, np.array(ref["output"]), **TOL)


@settings(max_examples=100, deadline=None)
@given(cases())
def test_invariants(case: Case) -> None:
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    allow = np.array(case.allow)
    for head in comp.heads:
        assert np.allclose(head.weights.sum(axis=1), 1.0, **TOL)
        assert (head.weights[~allow] == 0.0).all()  # exactly zero, not merely small
        assert (head.weights >= 0).all()
        assert np.isneginf(head.masked[~allow]).all()
        assert np.allclose(head.output, head.weights @ head.V, **TOL)


def test_every_shipped_scenario_keeps_the_invariants() -> None:
    for path in SCENARIOS:
        comp = compute(load_scenario(path))
        for head in comp.heads:
            if head.part(DeltaForward) is not None or head.part(SsdRecord) is not None:
                assert (head.weights[~comp.allow] == 0.0).all()  # q·kᵀ (C·Bᵀ) times a decaying mask: no distribution
                continue
            sunk = head.part(Sunk)
            sink_share = sunk.sink_exp / head.row_sum if sunk is not None else 0.0  # a sink's dropped column
            assert np.allclose(head.weights.sum(axis=1) + sink_share, row_total(head))  # 1 − λ: differential
            assert (head.weights[~comp.allow] == 0.0).all()
            assert (head.scaled.argmax(axis=1) == head.scores.argmax(axis=1)).all()  # scaling keeps the winner


def test_causal_mask_blocks_the_future() -> None:
    head = compute(load_scenario("causal_mask")).heads[0]
    assert head.weights[0].tolist() == [1.0, 0.0, 0.0]
    assert np.allclose(head.weights[1], [0.5, 0.5, 0.0])
    seed = compute(load_scenario("i_love_ai")).heads[0]
    assert np.allclose(head.weights[2], seed.weights[2])  # the last token sees everything


def test_padding_leaves_real_rows_unchanged() -> None:
    padded = compute(load_scenario("padding_mask")).heads[0]
    seed = compute(load_scenario("i_love_ai")).heads[0]
    assert (padded.weights[:, 3] == 0).all()
    assert np.allclose(padded.weights[:3, :3], seed.weights)
    assert np.allclose(padded.output[:3], seed.output)


def test_split_heads_are_column_slices() -> None:
    sc = load_scenario("split_heads")
    assert len(sc.heads) == 2
    assert sc.heads[1].W_Q.tolist() == [[0, 0], [0, 1], [1, 0], [1, -1]]  # columns 2-3 of the wide W_Q
    comp = compute(sc)
    assert comp.concat.shape == (3, 4)
    assert comp.heads[0].scale == np.sqrt(2)


def test_two_heads_concat_and_w_o() -> None:
    comp = compute(load_scenario("two_heads"))
    assert comp.concat.shape == (3, 5)
    assert comp.W_O is not None
    assert np.allclose(comp.output, comp.concat @ comp.W_O)
    assert np.allclose(comp.concat[:, :3], comp.heads[0].output)


def test_cross_attention_keys_come_from_the_context() -> None:
    sc = load_scenario("cross_attention")
    comp = compute(sc)
    head = comp.heads[0]
    assert sc.context_X is not None
    assert np.allclose(head.K, sc.context_X @ sc.heads[0].W_K)
    assert head.scores.shape == (3, 3)


def test_scale_one_skips_scaling(write) -> None:
    from .conftest import BASE, HEAD

    comp = compute(load_scenario(write(BASE + "scale = 1\n" + HEAD)))
    head = comp.heads[0]
    assert head.scale == 1.0
    assert np.array_equal(head.scaled, head.scores)
