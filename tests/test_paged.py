"""The paged KV cache: block tables, allocation, and outputs equal to a contiguous cache."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import ScenarioError, parse_scenario
from qkv_tui.teach.decode import SCHEDULES, decode
from qkv_tui.teach.paged import empty_table, pool_order

from .conftest import BASE, HEAD
from .strategies import Case, cases


@settings(max_examples=60, deadline=None)
@given(cases(), st.integers(1, 6), st.randoms(use_true_random=False), st.sampled_from(SCHEDULES))
def test_paged_decode_equals_contiguous_decode(case: Case, block: int, rnd, mode: str) -> None:
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    cached = comp.scenario.m if comp.scenario.is_cross else comp.scenario.n
    pool = list(range(-(-cached // block) + rnd.randint(0, 3)))
    rnd.shuffle(pool)
    dec = decode(comp, mode, block_size=block, order=tuple(pool))
    for steps in dec.steps:
        for step in steps:
            assert step.paged_error == 0.0  # the same rows, read through the table: the same numbers exactly
    last = dec.paging[-1].table
    assert last.physical == tuple(pool[: len(last.physical)])  # blocks handed out in the pool's order
    for t in range(cached):
        a = last.address(t)
        assert (a.logical, a.slot) == divmod(t, block) and a.physical == last.physical[a.logical]


def test_a_new_block_is_allocated_when_one_fills() -> None:
    dec = decode(compute(load_scenario("i_love_ai")), "tokens", block_size=2, order=(7, 2, 5, 0))
    assert [p.allocated for p in dec.paging] == [(7,), (), (2,)]
    assert [p.table.physical for p in dec.paging] == [(7,), (7,), (7, 2)]
    assert dec.paging[2].writes[0].text("AI") == "token 2 (AI) → block_table[1] = physical 2, slot 0"


def test_pool_order_is_seeded_and_a_permutation() -> None:
    assert pool_order(8, 0) == pool_order(8, 0)
    assert sorted(pool_order(8, 3)) == list(range(8))
    assert pool_order(8, 0) != tuple(range(8))
    with pytest.raises(ValueError, match="exhausted"):
        empty_table(2, (0,)).grow(3)


def test_cache_settings_are_read_and_checked() -> None:
    sc = parse_scenario(BASE + "[cache]\nblock_size = 3\nprefill = 2\nchunk = 1\nseed = 5\n" + HEAD, "c.toml")
    assert (sc.production.block_size, sc.production.prefill, sc.production.chunk, sc.production.seed) == (3, 2, 1, 5)
    for bad, words in (("block_size = 0", "[cache] block_size = 0; expected a whole number from 1"),
                       ("prefill = 4", "[cache] prefill = 4; expected a whole number from 1 to 3"),
                       ("prefill = 2\nchunk = 3", "[cache] chunk = 3; expected a whole number from 1 to 2"),
                       ("blocksize = 2", "unknown key 'blocksize' in [cache]; did you mean 'block_size'?"),
                       ("seed = true", "[cache] seed is a boolean (true); expected a whole number"),
                       ("seed = 0x" + "f" * 4000, "[cache] seed = an integer of about 4,817 digits; expected")):
        with pytest.raises(ScenarioError, match=re.escape(words)):
            parse_scenario(BASE + f"[cache]\n{bad}\n" + HEAD, "c.toml")
    with pytest.raises(ScenarioError, match="tiles must be a table"):
        parse_scenario("tiles = 2\n" + BASE + HEAD, "c.toml")


def test_paging_is_shared_by_every_head() -> None:
    dec = decode(compute(load_scenario("two_heads")))
    assert len(dec.paging) == dec.count
    assert all(np.array_equal(s.paged_output, s.output) for steps in dec.steps for s in steps)


def test_a_sliding_window_keeps_a_rolling_buffer() -> None:
    comp = compute(load_scenario("sliding_window"))  # window 3, six tokens
    dec = decode(comp, "tokens", block_size=2, order=(3, 2, 5, 0, 1, 4))
    steps = dec.steps[0]
    assert [s.first for s in steps] == [0, 0, 0, 1, 2, 3]  # at most 3 rows kept
    assert [list(s.evicted) for s in steps] == [[], [], [], [0], [1], [2]]
    assert all(s.K_cache.shape[0] <= 3 and s.matches and s.paged_error == 0 for s in steps)
    # block 3 held a and b: once both have left the window it goes back to the pool and is reused first
    assert dec.paging[4].freed == (3,) and dec.paging[4].allocated == (3,)
    assert dec.paging[4].table.physical == (-1, 2, 3)
    assert np.allclose(np.concatenate([s.output for s in steps]), comp.heads[0].output)
