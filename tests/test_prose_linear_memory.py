"""Linear attention's words against its numbers (the issue: "n² numbers that grow with the text" compared the
n × n matrix with the state, where decoding with a softmax keeps a KV cache of n·(dₖ + d_v) numbers; and the
Feature stage credited the reuse to φ's positivity, where it comes from factorising φ(q)·φ(k)).

The counts are computed here from the scenario's own sizes; the reuse is checked for the identity φ too."""

from __future__ import annotations

import re

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import builtin_dir, load_scenario, parse_scenario
from qkv_tui.kernels.linear import LinearForward
from qkv_tui.teach.trace import Trace

BUILTIN = (builtin_dir() / "linear.toml").read_text(encoding="utf-8")


def details(text: str) -> list[str]:
    trace = Trace(compute(parse_scenario(text, "linear.toml")))
    out = []
    for i in range(len(trace)):
        op = trace._build(i)
        out += [op.arithmetic, *op.details]
    return out


def memory(text: str) -> str:
    return next(line for line in details(text) if line.startswith("memory while decoding:"))


def wider(text: str) -> str:
    """A head with d_v = 3: W_V gains a column."""
    return re.sub(r"W_V = \[\n  \[1, 0\],\n  \[0, 1\],\n  \[1, 1\],\n  \[0, 2\],\n\]",
                  "W_V = [\n  [1, 0, 1],\n  [0, 1, 0],\n  [1, 1, 0],\n  [0, 2, 1],\n]", text)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("widen", [False, True])
def test_the_cache_and_the_state_counted_from_the_scenarios_sizes(normalize: bool, widen: bool) -> None:
    text = BUILTIN.replace("normalize = true", f"normalize = {str(normalize).lower()}")
    if widen:
        text = wider(text)
    sc = parse_scenario(text, "linear.toml")
    n, d_k, d_v = sc.n, sc.heads[0].W_Q.shape[1], sc.heads[0].W_V.shape[1]
    assert d_v == (3 if widen else 2)
    line = memory(text)
    cache = n * (d_k + d_v)
    state = d_k * d_v + (d_k if normalize else 0)
    assert f"KV cache of n·(dₖ + d_v) = {n}·({d_k} + {d_v}) = {cache} numbers, {d_k + d_v} more with every token" in line
    assert f"the state holds dₖ × d_v{' + dₖ' if normalize else ''} = " in line
    assert f"= {state} numbers however many tokens come" in line
    assert f"the n × n matrix, {n}² = {n * n} here, is the cost of working all n tokens at once" in line
    assert "n² numbers that grow" not in line


def test_the_builtins_description_quotes_12_growing_by_4_against_6() -> None:
    sc = load_scenario("linear")
    words = " ".join(sc.description.split())
    assert "n·(dₖ + d_v) = 3·(2 + 2) = 12 numbers that grow by 4 with every token" in words
    assert "the state's dₖ × d_v + dₖ = 6 that never grow" in words
    assert "e^(q·k/√dₖ)" in words and "e^(q·k)" not in words
    line = memory(BUILTIN)
    assert "= 12 numbers, 4 more with every token" in line and "= 2·2 + 2 = 6 numbers" in line


def test_the_feature_stage_gives_reuse_and_sign_their_own_reasons() -> None:
    trace = Trace(compute(load_scenario("linear")))
    words = trace.meaning("phi", 0)
    assert "The reuse comes from the factorisation" in words and "(φ(Q)φ(K)ᵀ)V = φ(Q)(φ(K)ᵀV)" in words
    assert "whatever φ is, the identity included" in words
    assert "The sign comes from φ: where φ ≥ 0 every similarity φ(q)·φ(k) is ≥ 0" in words
    assert "which keeps it positive, so that" not in words
    assert "e^(q·k/√dₖ)" in trace.meaning("quadratic", 0)


def test_the_reuse_holds_for_the_identity_feature_map() -> None:
    """φ(x) = x: the recurrent form (the keys' sums built once) gives the quadratic form's outputs."""
    text = BUILTIN.replace('feature = "elu1"', 'feature = "identity"').replace("normalize = true", "normalize = false")
    head = compute(parse_scenario(text, "identity.toml")).heads[0]
    lin = head.part(LinearForward)
    assert lin is not None
    assert np.allclose(lin.recurrent, lin.output)
    assert sum(line.startswith("✓ o[") for line in details(text)) == 3
    words = Trace(compute(parse_scenario(text, "identity.toml"))).meaning("phi", 0)
    assert "the reuse holds, but nothing keeps them ≥ 0" in words
