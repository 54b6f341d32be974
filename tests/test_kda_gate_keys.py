"""The per-channel gate keys of [deltanet] (core/variants/kda_gates.py), called directly with the loader's own
checker (not registered until the engine runs kernels/kda.py): every error is one line naming the key and what was
expected; what they write reads back to the same values; the parsed values run the kernel."""

from __future__ import annotations

import tomllib
from typing import Any

import numpy as np
import pytest

from qkv_tui.core.scenario import ScenarioError, _Validator
from qkv_tui.core.variants.common import Context
from qkv_tui.core.variants.kda_gates import kernel_weights, parse_kda_gates, per_channel, summary, write_kda_gates
from qkv_tui.kernels.kda import channel_gates, kda_forward

N, D_MODEL, H, D_K = 3, 4, 2, 2
RNG = np.random.default_rng(11)


def _ctx(heads: tuple[tuple[str, int], ...] = (("head 1", D_K), ("head 2", D_K))) -> Context:
    return Context(_Validator("t.toml"), tuple(f"t{i}" for i in range(N)), D_MODEL, False, heads, "causal",
                   np.tril(np.ones((N, N), dtype=bool)))


def _m(rows: int, cols: int) -> list[list[float]]:
    out: list[list[float]] = RNG.normal(size=(rows, cols)).round(3).tolist()
    return out


G = (-RNG.uniform(0, 2, size=(N, H, D_K))).round(3).tolist()


def _weights(**over: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"W_fa": _m(D_MODEL, D_K), "W_fb": _m(D_K, H * D_K), "A_log": [0.1, -0.4],
                         "dt_bias": _m(H, D_K), "W_b": _m(D_MODEL, H)}
    t.update(over)
    return {k: v for k, v in t.items() if v is not None}


def _message(table: dict[str, Any], ctx: Context | None = None) -> str:
    with pytest.raises(ScenarioError) as err:
        parse_kda_gates(table, ctx or _ctx())
    text = err.value.message
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.mark.parametrize(("table", "says"), [
    ({"g": "x"}, "[deltanet] g must be a list of 3 rows (n × num_heads × d_k, each channel's log decay), got a string"),
    ({"g": G[:2]}, "[deltanet] g has 2 rows; expected 3, one per token"),
    ({"g": [G[0], [G[1][0]], G[2]]}, "[deltanet] g row 2 has 1 list; expected 2, one per head"),
    ({"g": [G[0], G[1], [G[2][0], [-0.1]]]}, "[deltanet] g row 3 head 2 has 1 number; expected 2 (one per key channel"),
    ({"g": [G[0], [G[1][0], [-0.1, 0.5]], G[2]]}, "[deltanet] g row 2, head 2, channel 2 is 0.5; expected g <= 0"),
    ({"g": G, "A_log": [0.0, 0.0]}, "[deltanet] has both g and A_log; expected g (n × num_heads × d_k)"),
    (_weights(W_a=_m(D_MODEL, H)), "[deltanet] has both W_a and a per-channel gate"),
    (_weights(dt_bias=None), "[deltanet] is missing 'dt_bias'; expected W_fa (d_model × r)"),
    (_weights(W_fa=_m(3, D_K)), "[deltanet] W_fa has 3 rows; expected d_model = 4"),
    (_weights(W_fb=_m(3, H * D_K)), "[deltanet] W_fb has 3 rows; expected 2, W_fa's columns (the bottleneck r)"),
    (_weights(W_fb=_m(D_K, 3)), "[deltanet] W_fb has 3 columns; expected 4, every head's d_k key channels side by side"),
    (_weights(A_log=[0.1]), "[deltanet] A_log has 1 number; expected 2 (one per head, num_heads)"),
    (_weights(dt_bias=[[0.1, 0.2], [0.3]]), "[deltanet] dt_bias head 2 has 1 number; expected 2"),
    (_weights(dt_bias=[[0.1, "a"], [0.3, 0.1]]), "[deltanet] dt_bias head 1 item 2 must be"),
])
def test_errors_are_one_line(table: dict[str, Any], says: str) -> None:
    assert per_channel(table) or table["g"] == "x"  # a g that is no list is [deltanet]'s to refuse
    assert _message(table).startswith(says)


def test_unequal_head_widths_need_g_given() -> None:
    ctx = _ctx((("head 1", 2), ("head 2", 3)))
    assert "need every head's d_k equal" in _message(_weights(W_fb=_m(D_K, 5)), ctx)


def test_deltanet_tables_are_not_per_channel() -> None:
    assert not per_channel({"g": [[-0.1, -0.2]] * N, "beta": [[0.5, 0.5]] * N})
    assert not per_channel({"W_a": _m(D_MODEL, H), "A_log": [0.0, 0.0], "dt_bias": [0.0, 0.0]})


def test_given_g_round_trips_and_runs() -> None:
    kg = parse_kda_gates({"g": G}, _ctx())
    assert kg.g is not None and kg.g[1].shape == (N, D_K)
    again = parse_kda_gates(tomllib.loads("\n".join(write_kda_gates(kg))), _ctx())
    assert again.g is not None
    for a, b in zip(kg.g, again.g):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(kg.g[1], np.array(G)[:, 1])
    Q, K, V = RNG.normal(size=(N, D_K)), RNG.normal(size=(N, D_K)), RNG.normal(size=(N, 3))
    assert kda_forward(Q, K, V, kg.g[0], np.full(N, 0.5)).g.shape == (N, D_K)
    assert summary(kg) == "g per key channel (Kimi Delta Attention)"
    equal = parse_kda_gates({"g": [[[-0.5, -0.5], [-1.0, -1.0]]] * N}, _ctx())
    assert summary(equal) == "g per key channel, every channel's equal (Gated DeltaNet's rule)"


def test_weights_round_trip_and_run() -> None:
    table = _weights()
    kg = parse_kda_gates(table, _ctx())
    again = parse_kda_gates(tomllib.loads("\n".join(write_kda_gates(kg))), _ctx())
    for a, b in zip(kernel_weights(kg), kernel_weights(again)):
        np.testing.assert_array_equal(a, b)
    W_fa, W_fb, A_log, dt_bias = kernel_weights(kg)
    np.testing.assert_array_equal(dt_bias, np.array(table["dt_bias"]).reshape(-1))
    X = RNG.normal(size=(N, D_MODEL))
    gates = channel_gates(X, W_fa, W_fb, A_log, dt_bias, np.array(table["W_b"]))
    a = (X @ np.array(table["W_fa"])) @ np.array(table["W_fb"]) + dt_bias  # (n, H·d_k)
    want = -np.exp(np.array(table["A_log"]))[None, :, None] * np.log1p(np.exp(a)).reshape(N, H, D_K)
    np.testing.assert_allclose(gates.g, want, rtol=1e-12)
    assert summary(kg).startswith("g per key channel from W_fa")
