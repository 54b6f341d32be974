"""The JSON export of scenarios combining every variant feature, against PyTorch's own functions.

PyTorch has F.rms_norm, F.layer_norm, F.linear and scaled_dot_product_attention (with
enable_gqa for shared K/V heads and a float attn_mask carrying ALiBi's bias and the mask's
-inf). It has no RoPE function, so rotation is written the two ways the libraries write it:
Meta's LLaMA code (complex multiplication, interleaved pairs) and Hugging Face's rotate_half.
A sink is done as gpt-oss does it: an extra logit column joins the softmax, then is dropped.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

from qkv_tui import compute
from qkv_tui.core.scenario import Scenario, parse_scenario
from qkv_tui.core.variants.alibi import TABLE as ALIBI
from qkv_tui.edges.export_json import write_json

from .variants_cases import ModernCase, modern_cases

torch = pytest.importorskip("torch", reason="PyTorch is in the test extra (pip install -e '.[test]')")
F = torch.nn.functional

TOL = {"rtol": 1e-9, "atol": 1e-9}


def t(values: Any) -> Any:
    return torch.tensor(values, dtype=torch.float64)


def rope_meta(x: Any, positions: list[int], base: float) -> Any:
    """Meta's LLaMA apply_rotary_emb: pairs (2i, 2i+1) as complex numbers times e^(i·p·θ)."""
    d = x.shape[-1]
    freqs = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = torch.outer(torch.tensor(positions, dtype=torch.float64), freqs)
    rotation = torch.polar(torch.ones_like(angles), angles)
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(pairs * rotation).flatten(-2)


def rope_hf(x: Any, positions: list[int], base: float) -> Any:
    """Hugging Face's apply_rotary_pos_emb: q·cos + rotate_half(q)·sin, pairs (i, i + d/2)."""
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = torch.outer(torch.tensor(positions, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    half = d // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * emb.cos() + rotated * emb.sin()


def check_against_torch(sc: Scenario) -> None:
    text = io.StringIO()
    write_json(sc, text)  # the streaming export the command line writes
    data = json.loads(text.getvalue())
    X = t(sc.X)
    if sc.norm is not None:
        gamma = t(sc.norm.gamma)
        if sc.norm.kind == "rms":
            X = F.rms_norm(X, (X.shape[1],), weight=gamma, eps=sc.norm.eps)
        else:
            beta = t(sc.norm.beta) if sc.norm.beta is not None else None
            X = F.layer_norm(X, (X.shape[1],), weight=gamma, bias=beta, eps=sc.norm.eps)
        assert np.allclose(data["X_norm"], X.numpy(), **TOL)
    else:
        assert data["X_norm"] is None
    X_kv = t(sc.context_X) if sc.context_X is not None else X

    def linear(x: Any, W: Any, b: Any) -> Any:
        return F.linear(x, t(W).T, t(b) if b is not None else None)

    heads = sc.heads
    H = len(heads)
    kv_ids = [sc.kv_head(h) for h in range(H)]
    num_kv = len(set(kv_ids))
    groups_ok = kv_ids == [h * num_kv // H for h in range(H)]  # sdpa's enable_gqa assumes this grouping
    qs, ks, vs, masks = [], {}, {}, []
    for h, head in enumerate(heads):
        q = linear(X, head.W_Q, head.b_Q)
        k = linear(X_kv, head.W_K, head.b_K)
        v = linear(X_kv, head.W_V, head.b_V)
        exported = data["heads"][h]
        assert np.allclose(exported["Q"], q.numpy(), **TOL) and np.allclose(exported["K"], k.numpy(), **TOL)
        assert np.allclose(exported["V"], v.numpy(), **TOL)
        if sc.rope is not None:
            rotate = rope_meta if sc.rope.layout == "interleaved" else rope_hf
            q = rotate(q, list(sc.rope.positions), sc.rope.base)
            k = rotate(k, list(sc.rope.positions), sc.rope.base)
            assert np.allclose(exported["Q_rot"], q.numpy(), **TOL) and np.allclose(exported["K_rot"], k.numpy(), **TOL)
        else:
            assert exported["Q_rot"] is None and exported["K_rot"] is None
        mask = torch.where(torch.tensor(sc.allow), 0.0, float("-inf")).to(torch.float64)
        alibi = ALIBI.of(sc)
        if alibi is not None:
            assert sc.positions is not None
            p = t(list(sc.positions))
            bias = alibi.slopes[h] * (p[None, :] - p[:, None])
            assert np.allclose(exported["bias"], bias.numpy(), **TOL)
            mask = mask + bias
        qs.append(q)
        ks[kv_ids[h]], vs[kv_ids[h]] = k, v
        masks.append(mask)
        divisor = exported["scale"]
        if head.sink is None:
            out = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask[None], scale=1.0 / divisor)[0]
        else:  # gpt-oss: the sink's logit joins each row as an extra column, then that column is dropped
            logits = q @ k.T / divisor + mask
            sinks = torch.full((logits.shape[0], 1), head.sink, dtype=torch.float64)
            weights = torch.softmax(torch.cat([logits, sinks], dim=-1), dim=-1)[:, :-1]
            assert np.allclose(exported["weights"], weights.numpy(), **TOL)
            out = weights @ v
        assert np.allclose(exported["output"], out.numpy(), **TOL), exported["name"]
        assert exported["kv_head"] == kv_ids[h]
    if groups_ok and all(h.sink is None for h in heads) and len({q.shape[1] for q in qs}) == 1 and len(
        {v.shape[1] for v in vs.values()}
    ) == 1 and len({h.scale for h in compute(sc).heads}) == 1:
        # every head at once, K/V heads shared the way grouped-query attention shares them
        query = torch.stack(qs)[None]  # (1, H, n, d_k)
        key = torch.stack([ks[i] for i in range(num_kv)])[None]  # (1, H_kv, m, d_k)
        value = torch.stack([vs[i] for i in range(num_kv)])[None]  # (1, H_kv, m, d_v)
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=torch.stack(masks)[None], scale=1.0 / data["heads"][0]["scale"], enable_gqa=True,
        )[0]  # (H, n, d_v)
        concat = torch.cat(list(out), dim=-1)
        assert np.allclose(data["concat"], concat.numpy(), **TOL)
    concat = t(data["concat"])
    final = linear(concat, sc.W_O, sc.b_O) if sc.W_O is not None else concat
    assert np.allclose(data["output"], final.numpy(), **TOL)


@settings(max_examples=60, deadline=None)
@given(modern_cases())
def test_json_export_agrees_with_pytorch(case: ModernCase) -> None:
    check_against_torch(parse_scenario(case.toml, "generated.toml"))


@pytest.mark.parametrize("name", ["rope", "rope_layouts", "gqa", "mqa", "alibi", "sliding_window", "sink", "pre_norm"])
def test_builtin_scenarios_agree_with_pytorch(name: str) -> None:
    from qkv_tui import load_scenario

    check_against_torch(load_scenario(name))


def test_gqa_uses_sdpa_with_enable_gqa() -> None:
    """The gqa scenario all at once through sdpa's own grouped-query path."""
    from qkv_tui import load_scenario

    sc = load_scenario("gqa")
    comp = compute(sc)
    q = torch.stack([t(h.Q) for h in comp.heads])[None]  # (1, 4, 3, 2)
    k = torch.stack([t(comp.heads[0].K), t(comp.heads[2].K)])[None]  # (1, 2, 3, 2)
    v = torch.stack([t(comp.heads[0].V), t(comp.heads[2].V)])[None]
    out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)[0]
    assert np.allclose(comp.concat, torch.cat(list(out), dim=-1).numpy(), **TOL)
