"""The diagnosis tries each mistake on head 1 first and computes the other heads only for mistakes that
survive (a model-sized problem has ~170 candidates): head 1 computed alone is exactly head 1 of the whole."""

from __future__ import annotations

import numpy as np
import pytest

from qkv_tui.core.diagnose import forward, problem_of, variants
from qkv_tui.core.scenario import scenario_from_data


def test_one_head_alone_is_that_head_of_the_whole() -> None:
    rng = np.random.default_rng(1)
    n, d_model, heads = 4, 8, 2
    doc = {"tokens": [f"t{i}" for i in range(n)], "X": rng.normal(size=(n, d_model)), "mask": "causal",
           "attention": {"num_heads": heads, **{w: rng.normal(size=(d_model, d_model)) for w in ("W_Q", "W_K", "W_V")}},
           "output": {"W_O": rng.normal(size=(d_model, d_model))},
           "rope": {"layout": "interleaved", "base": 10000.0, "positions": list(range(n))}}
    p = problem_of(scenario_from_data(doc, "t"))
    assert not isinstance(p, str)
    for variant in ["", *variants(p)]:
        combo = frozenset({variant}) if variant else frozenset()
        whole = forward(p, combo)
        for h in range(heads):
            alone = forward(p, combo, only_head=h)
            for key in ("scores", "scaled", "weights", "mix"):
                np.testing.assert_array_equal(alone.get(key)[0], whole.get(key)[h], err_msg=f"{variant} {key} {h}")


@pytest.mark.parametrize("key", ["final"])
def test_one_head_alone_has_no_output(key: str) -> None:
    rng = np.random.default_rng(2)
    doc = {"tokens": ["a", "b"], "X": rng.normal(size=(2, 4)),
           "attention": {"num_heads": 2, **{w: rng.normal(size=(4, 4)) for w in ("W_Q", "W_K", "W_V")}}}
    p = problem_of(scenario_from_data(doc, "t"))
    assert not isinstance(p, str)
    assert forward(p, only_head=1).get(key).size == 0
