"""The [indexer] and [ssd] tables' parsers, called directly with the loader's own checker (they are not
registered in core/variants FEATURES until the engine runs them): every error is one line naming the table,
the key and what was expected; the TOML they write reads back to the same values; the parsed tables run."""

from __future__ import annotations

import tomllib
from typing import Any

import numpy as np
import pytest

from qkv_tui.core.scenario import ScenarioError, _Validator
from qkv_tui.core.variants import indexer as ix_keys
from qkv_tui.core.variants import ssd as ssd_keys
from qkv_tui.core.variants.common import Context
from qkv_tui.core.variants.mla import Mla
from qkv_tui.core.variants.rope import Rope
from qkv_tui.kernels.indexer import index
from qkv_tui.kernels.rope import columns
from qkv_tui.kernels.ssd import gated_norm, ssd, steps

N, D_MODEL = 4, 4
RNG = np.random.default_rng(7)


def _ctx(earlier: dict[str, object] | None = None, cross: bool = False) -> Context:
    allow = np.tril(np.ones((N, N), dtype=bool))
    return Context(_Validator("t.toml"), tuple(f"t{i}" for i in range(N)), D_MODEL, cross, (("head 1", 2),),
                   "causal", allow, dict(earlier or {}))


def _m(rows: int, cols: int) -> list[list[float]]:
    return RNG.normal(size=(rows, cols)).round(3).tolist()


def _indexer_table(**over: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"num_heads": 2, "W_q": _m(D_MODEL, 8), "W_k": _m(D_MODEL, 4), "W_w": _m(D_MODEL, 2),
                         "top_k": 2, "rope_dims": 2, "rope_layout": "interleaved",
                         "k_norm": {"gamma": [1.0, 0.5, 2.0, 1.5], "beta": [0.0, 0.1, -0.2, 0.3]}}
    t.update(over)
    return {k: v for k, v in t.items() if v is not None}


def _ssd_table(**over: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"num_heads": 2, "num_groups": 2, "A": [-0.5, -1.25], "W_dt": _m(D_MODEL, 2),
                         "dt_bias": [0.1, -0.3], "B": _m(N, 6), "C": _m(N, 6), "x": _m(N, 4), "D": [1.0, 0.5],
                         "z": _m(N, 4), "gamma": [1.0, 2.0, 0.5, 1.5], "eps": 1e-5}
    t.update(over)
    return {k: v for k, v in t.items() if v is not None}


ROPE = Rope(10000.0, "half", tuple(range(N)))


def _message(parse: Any, table: dict[str, Any], ctx: Context) -> str:
    with pytest.raises(ScenarioError) as err:
        parse(table, ctx)
    text = err.value.message
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.mark.parametrize(("over", "says"), [
    ({"num_heads": None}, "[indexer] is missing 'num_heads'"),
    ({"num_heads": 2.0}, "[indexer] num_heads must be a whole number >= 1 (how many index heads), got a number (2.0);"
                         " write 2, without the decimal point"),
    ({"num_heads": 0}, "[indexer] num_heads must be a whole number >= 1"),
    ({"W_k": None}, "[indexer] is missing 'W_k'; expected 4 rows (d_model, the width of X)"),
    ({"W_k": _m(3, 4)}, "[indexer] W_k has 3 rows; expected d_model, the width of X = 4"),
    ({"W_q": _m(D_MODEL, 6)}, "[indexer] W_q has 6 columns; expected num_heads × d_I = 2 × 4 = 8"),
    ({"W_q": _m(5, 8)}, "[indexer] W_q has 5 rows; expected d_model, the width of X = 4"),
    ({"W_w": _m(D_MODEL, 3)}, "[indexer] W_w has 3 columns; expected num_heads = 2 (one weight per index head) = 2"),
    ({"W_w": [[1.0, "a"]] * D_MODEL}, "[indexer] W_w row 1, column 2 must be a number, got a string"),
    ({"top_k": None}, "[indexer] is missing 'top_k'; expected top_k = <whole number >= 1>"),
    ({"top_k": True}, "[indexer] top_k must be a whole number >= 1 (how many keys each query keeps), got a boolean"),
    ({"rope_dims": 3}, "[indexer] rope_dims = 3; expected an even number"),
    ({"rope_dims": 6}, "[indexer] rope_dims = 6; expected at most d_I = 4 (W_k's columns)"),
    ({"rope_layout": "halves"}, "[indexer] rope_layout = 'halves' is not allowed; expected one of: 'half', 'interleaved';"
                                " did you mean 'half'?"),
    ({"k_norm": "yes"}, "[indexer] k_norm must be true, false or a table of gamma, beta and eps"),
    ({"k_norm": {"gamma": [1.0]}}, "[indexer] k_norm gamma has 1 number; expected 4 (gains, one per column of W_k, d_I = 4)"),
    ({"k_norm": {"eps": 0}}, "[indexer] k_norm eps = 0; expected a finite number > 0"),
    ({"k_norm": {"gama": [1.0]}}, "unknown key 'gama' in [indexer] k_norm; did you mean 'gamma'?"),
])
def test_indexer_errors_are_one_line(over: dict[str, Any], says: str) -> None:
    assert says in _message(ix_keys.parse_indexer, _indexer_table(**over), _ctx({"rope": ROPE}))


def test_indexer_needs_rope_for_turned_dims_and_self_attention() -> None:
    assert "[indexer] rope_dims = 2 needs [rope]" in _message(ix_keys.parse_indexer, _indexer_table(), _ctx())
    assert "[indexer] needs self-attention" in _message(ix_keys.parse_indexer, _indexer_table(), _ctx(cross=True))
    ok = ix_keys.parse_indexer(_indexer_table(rope_dims=0), _ctx())
    assert ok.rope_dims == 0 and ok.rope_layout == "interleaved"


def test_indexer_w_q_reads_mla_query_latent_as_the_models_do() -> None:
    mla = Mla(2, 2, 2, 2, np.ones((D_MODEL, 3)), np.ones((3, 4)), np.ones((3, 4)), np.ones((D_MODEL, 2)), None,
              np.ones((D_MODEL, 5)), np.ones((5, 8)), False, np.ones(3), False, None, 1e-6)
    text = _message(ix_keys.parse_indexer, _indexer_table(), _ctx({"rope": ROPE, "mla": mla}))
    assert "[indexer] W_q has 4 rows; expected d_cq, the columns of [mla] W_DQ" in text
    parsed = ix_keys.parse_indexer(_indexer_table(W_q=_m(5, 8)), _ctx({"rope": ROPE, "mla": mla}))
    assert parsed.from_latent
    with pytest.raises(ValueError, match="c_Q"):
        ix_keys.run(parsed, np.ones((N, D_MODEL)), np.tril(np.ones((N, N), dtype=bool)), ROPE)


def test_indexer_did_you_mean_names_and_transformers_names() -> None:
    v = _Validator("t.toml")
    with pytest.raises(ScenarioError, match=r"unknown key 'topk' in \[indexer\]; did you mean 'top_k'\?"):
        v.known({"topk": 2}, ix_keys.INDEXER_KEYS, "[indexer]")
    # the loader reads these once the table is registered (variants.LOOKALIKES)
    assert ix_keys.TABLE.lookalikes[("[indexer]", "index_topk")][0] == "top_k"
    assert ix_keys.TABLE.lookalikes[("[indexer]", "wq_b")][0] == "W_q"
    assert all(twin in ix_keys.INDEXER_KEYS for twin, _ in ix_keys.TABLE.lookalikes.values())


def test_indexer_writes_back_what_it_read_and_runs() -> None:
    table = _indexer_table()
    parsed = ix_keys.parse_indexer(table, _ctx({"rope": ROPE}))
    again = ix_keys.parse_indexer(tomllib.loads("\n".join(ix_keys.write_indexer(parsed)))["indexer"], _ctx({"rope": ROPE}))
    for key in ("W_q", "W_k", "W_w", "k_gamma", "k_beta"):
        assert np.array_equal(getattr(parsed, key), getattr(again, key))
    assert (again.num_heads, again.top_k, again.rope_dims, again.rope_layout, again.k_norm, again.k_eps) == (
        2, 2, 2, "interleaved", True, 1e-6)
    assert np.array_equal(parsed.k_gamma, table["k_norm"]["gamma"])
    X = RNG.normal(size=(N, D_MODEL))
    allow = np.tril(np.ones((N, N), dtype=bool))
    out = ix_keys.run(parsed, X, allow, ROPE)
    direct = index(X, parsed.weights(), allow, turn=columns(parsed.rope_dims, parsed.rope_layout, ROPE.positions, ROPE.base))
    assert np.array_equal(out.scores, direct.scores) and (out.selected.sum(axis=1) == np.minimum(np.arange(1, N + 1), 2)).all()
    plain = ix_keys.parse_indexer(_indexer_table(k_norm=None, rope_dims=0), _ctx())
    assert not plain.k_norm and "k_norm = false" in ix_keys.write_indexer(plain)
    assert ix_keys.TABLE.summary(parsed) == "sparse attention (indexer: 2 index heads, d_I 4, top-2)"


@pytest.mark.parametrize(("over", "says"), [
    ({"num_heads": None}, "[ssd] is missing 'num_heads'"),
    ({"num_groups": 3}, "[ssd] num_groups = 3 does not divide num_heads = 2"),
    ({"A": None}, "[ssd] is missing 'A'; expected 2 numbers < 0"),
    ({"A": [-1.0, 0.0]}, "[ssd] A item 2 = 0.0; expected a number < 0"),
    ({"A": [-1.0]}, "[ssd] A has 1 number; expected 2 (each head's decay rate, < 0)"),
    ({"dt": _m(N, 2)}, "[ssd] gives both dt and W_dt"),
    ({"W_dt": None, "dt_bias": None}, "[ssd] is missing the steps: expected dt (4 rows of 2 numbers > 0) or W_dt"),
    ({"W_dt": None, "dt": [[0.5, 0.5]] * N}, "[ssd] dt_bias needs W_dt beside it"),
    ({"W_dt": None, "dt_bias": None, "dt": [[0.5, 0.5], [0.5, -0.1], [1, 1], [1, 1]]},
     "[ssd] dt row 2, column 2 = -0.1; expected a number > 0"),
    ({"W_dt": _m(3, 2)}, "[ssd] W_dt has 3 rows; expected d_model, the width of X = 4"),
    ({"B": _m(N, 5)}, "[ssd] B has 5 columns; expected num_groups × d_state, a multiple of num_groups = 2"),
    ({"B": _m(3, 6)}, "[ssd] B has 3 rows; expected one per token = 4"),
    ({"C": _m(N, 4)}, "[ssd] C has 4 columns; expected B's columns, num_groups × d_state = 6"),
    ({"x": _m(N, 3)}, "[ssd] x has 3 columns; expected a multiple of num_heads = 2"),
    ({"x": None, "z": None, "gamma": None, "eps": None, "num_heads": 3, "num_groups": 1, "A": [-1.0] * 3,
      "W_dt": _m(D_MODEL, 3), "dt_bias": None, "D": None},
     "[ssd] x is X (not given), d_model = 4; expected a multiple of num_heads = 3"),
    ({"z": _m(N, 2)}, "[ssd] z has 2 columns; expected x's columns, num_heads × d = 4"),
    ({"z": None}, "[ssd] gamma needs z beside it"),
    ({"eps": -1}, "[ssd] eps = -1; expected a finite number > 0"),
    ({"dt_min": -0.5}, "[ssd] dt_min = -0.5; expected a number >= 0 (a step is never negative)"),
    ({"dt_min": 0.5, "dt_max": 0.5}, "[ssd] dt_max = 0.5; expected a number > dt_min = 0.5"),
    ({"W_dt": None, "dt_bias": None, "dt": [[0.5, 0.5]] * N, "dt_min": 0.1}, "[ssd] dt_min needs W_dt beside it"),
    ({"D": "one"}, "[ssd] D must be a list of 2 numbers (each head's skip, y += D·x), got a string"),
])
def test_ssd_errors_are_one_line(over: dict[str, Any], says: str) -> None:
    assert says in _message(ssd_keys.parse_ssd, _ssd_table(**over), _ctx())


def test_ssd_did_you_mean_and_self_attention() -> None:
    with pytest.raises(ScenarioError, match=r"unknown key 'dt_bais' in \[ssd\]; did you mean 'dt_bias'\?"):
        _Validator("t.toml").known({"dt_bais": 1}, ssd_keys.SSD_KEYS, "[ssd]")
    assert ssd_keys.TABLE.lookalikes[("[ssd]", "A_log")][0] == "A"
    assert all(twin in ssd_keys.SSD_KEYS for twin, _ in ssd_keys.TABLE.lookalikes.values())
    assert "[ssd] needs self-attention" in _message(ssd_keys.parse_ssd, _ssd_table(), _ctx(cross=True))


def test_ssd_writes_back_what_it_read_and_runs() -> None:
    parsed = ssd_keys.parse_ssd(_ssd_table(), _ctx())
    again = ssd_keys.parse_ssd(tomllib.loads("\n".join(ssd_keys.write_ssd(parsed)))["ssd"], _ctx())
    for key in ("A", "W_dt", "dt_bias", "B", "C", "x", "D", "z", "gamma"):
        assert np.array_equal(getattr(parsed, key), getattr(again, key)), key
    assert (again.num_heads, again.num_groups, again.d_state, again.eps, again.dt) == (2, 2, 3, 1e-5, None)
    assert again.dt_limit == (0.0, float("inf"))
    X = RNG.normal(size=(N, D_MODEL))
    heads, y = ssd_keys.run(parsed, X)
    assert parsed.W_dt is not None and parsed.x is not None and parsed.z is not None and parsed.gamma is not None
    dt = steps(X @ parsed.W_dt, parsed.dt_bias)
    expected = ssd(parsed.x, dt, parsed.A, parsed.B, parsed.C, parsed.D, 2)
    assert np.array_equal(heads.y, expected.y)
    assert np.array_equal(y, gated_norm(expected.y, parsed.z, parsed.gamma, 2, 1e-5))
    # steps given, x from X, no gate: the defaults (D = 0) and the plain y
    plain = ssd_keys.parse_ssd(_ssd_table(W_dt=None, dt_bias=None, dt=[[0.5, 1.0]] * N, x=None, z=None, gamma=None,
                                          eps=None, D=None), _ctx())
    heads, y = ssd_keys.run(plain, X)
    assert np.array_equal(y, heads.y) and not plain.D.any() and np.array_equal(heads.heads[1].x, X[:, 2:])
    clamped = ssd_keys.parse_ssd(_ssd_table(dt_min=0.9, dt_max=1.5), _ctx())
    assert ssd_keys.parse_ssd(tomllib.loads("\n".join(ssd_keys.write_ssd(clamped)))["ssd"], _ctx()).dt_limit == (0.9, 1.5)
    assert clamped.W_dt is not None
    np.testing.assert_array_equal(ssd_keys.run(clamped, X)[0].heads[0].dt,
                                  steps(X @ clamped.W_dt, clamped.dt_bias, (0.9, 1.5))[:, 0])
    assert (ssd_keys.run(clamped, X)[0].heads[0].dt >= 0.9).all()
    lines = ssd_keys.write_ssd(plain)
    assert "D = [0, 0]" in lines and not any(line.startswith("z =") for line in lines)
    assert ssd_keys.parse_ssd(tomllib.loads("\n".join(lines))["ssd"], _ctx()).dt is not None


def test_the_records_carry_the_json_fields_of_contracts_15() -> None:
    parsed = ssd_keys.parse_ssd(_ssd_table(), _ctx())
    heads, _ = ssd_keys.run(parsed, RNG.normal(size=(N, D_MODEL)))
    fields = heads.fields()
    assert [sorted(h) for h in fields["heads"]] == [["L", "a", "dt", "y"]] * 2
    assert [(h["dt"].shape, h["a"].shape, h["L"].shape, h["y"].shape) for h in fields["heads"]] == [
        ((N,), (N,), (N, N), (N, 2))] * 2
    ix = ix_keys.parse_indexer(_indexer_table(), _ctx({"rope": ROPE}))
    allow = np.tril(np.ones((N, N), dtype=bool))
    out = ix_keys.run(ix, RNG.normal(size=(N, D_MODEL)), allow, ROPE).fields()
    assert sorted(out) == ["scores", "selected"] and out["selected"].dtype == bool
    assert np.array_equal(np.isneginf(out["scores"]), ~allow) and not out["selected"][~allow].any()
