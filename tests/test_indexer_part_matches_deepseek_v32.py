"""[mla] with [indexer] as one layer, against transformers' own DeepseekV32Attention (DeepSeek Sparse Attention).

The attention module is built on a tiny config with transformers' class, its weights drawn at random and run in
float64 with the eager implementation; the scenario is written here from its state dict (nn.Linear's (out, in)
weights transposed): the latent layer as [mla], the indexer as [indexer] (W_q reads [mla]'s c_Q, as the model
feeds q_a_layernorm(q_a_proj(x)) to wq_b; k_norm a LayerNorm with gain and bias; the indexer's 2 rotary dims turn
half-split, the MLA's interleaved). transformers' indexer casts q and k to float32 (``q.float()``), so only the
selection is compared there, on draws whose scores are far apart. Its latent RMSNorms (q_a_layernorm,
kv_a_layernorm) also compute in float32 (``hidden_states.to(torch.float32)``), so the output after o_proj ("sdpa", a
boolean mask) agrees to float32 noise, as tests/test_importers_deepseek.py finds for DeepSeek-V3; with "eager" (an
additive mask) every head's weights, whose softmax is float32 too (``dtype=torch.float32``), likewise. Where the
indexer drops a key, both give it weight exactly 0.
"""

from __future__ import annotations

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.indexer_part import Selection
from qkv_tui.core.scenario import parse_scenario

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

FLOAT32 = 2e-5  # relative: the float32 RMSNorms' noise carried through the layer
N, HIDDEN, HEADS, D_CQ, D_C, D_NOPE, D_ROPE, D_V, H_I, D_I = 6, 8, 2, 6, 4, 2, 2, 2, 2, 4


def _rows(M: np.ndarray) -> str:
    return "[" + ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in M) + "]"


def _vec(v: np.ndarray) -> str:
    return "[" + ", ".join(repr(float(x)) for x in v) + "]"


def _module(seed: int, top_k: int, implementation: str) -> tuple[object, object]:
    from transformers import DeepseekV32Config
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as hf

    cfg = DeepseekV32Config(hidden_size=HIDDEN, num_attention_heads=HEADS, num_key_value_heads=HEADS, q_lora_rank=D_CQ,
                            kv_lora_rank=D_C, qk_nope_head_dim=D_NOPE, qk_rope_head_dim=D_ROPE, v_head_dim=D_V,
                            index_n_heads=H_I, index_head_dim=D_I, index_topk=top_k, num_hidden_layers=1,
                            vocab_size=16, intermediate_size=8, moe_intermediate_size=8, n_routed_experts=2,
                            num_experts_per_tok=1)
    cfg._attn_implementation = implementation
    torch.manual_seed(seed)
    attention = hf.DeepseekV32Attention(cfg, 0).double()
    for p in attention.parameters():
        torch.nn.init.normal_(p, std=0.6)
    return attention, hf.DeepseekV32RotaryEmbedding(cfg).double()


def _scenario(sd: dict[str, np.ndarray], X: np.ndarray, top_k: int) -> str:
    kv_b = sd["kv_b_proj.weight"]  # (H·(d_nope + d_v), d_c): each head's [k_nope | v] rows
    per = D_NOPE + D_V
    W_UK = np.concatenate([kv_b[h * per:h * per + D_NOPE].T for h in range(HEADS)], axis=1)
    W_UV = np.concatenate([kv_b[h * per + D_NOPE:(h + 1) * per].T for h in range(HEADS)], axis=1)
    kv_a = sd["kv_a_proj_with_mqa.weight"]
    tokens = ", ".join(f'"t{i}"' for i in range(N))
    return f"""
tokens = [{tokens}]
X = {_rows(X)}
mask = "causal"

[mla]
num_heads = {HEADS}
d_nope = {D_NOPE}
d_rope = {D_ROPE}
d_v = {D_V}
W_DKV = {_rows(kv_a[:D_C].T)}
W_KR = {_rows(kv_a[D_C:].T)}
W_UK = {_rows(W_UK)}
W_UV = {_rows(W_UV)}
W_DQ = {_rows(sd["q_a_proj.weight"].T)}
W_UQ = {_rows(sd["q_b_proj.weight"].T)}
kv_norm = true
gamma_kv = {_vec(sd["kv_a_layernorm.weight"])}
q_norm = true
gamma_q = {_vec(sd["q_a_layernorm.weight"])}
eps = 1e-6

[rope]
layout = "interleaved"
base = 10000.0

[indexer]
num_heads = {H_I}
top_k = {top_k}
rope_dims = {D_ROPE}
rope_layout = "half"
W_q = {_rows(sd["indexer.wq_b.weight"].T)}
W_k = {_rows(sd["indexer.wk.weight"].T)}
W_w = {_rows(sd["indexer.weights_proj.weight"].T)}
k_norm = {{ gamma = {_vec(sd["indexer.k_norm.weight"])}, beta = {_vec(sd["indexer.k_norm.bias"])}, eps = 1e-6 }}

[output]
W_O = {_rows(sd["o_proj.weight"].T)}
"""


def _run(seed: int, top_k: int, implementation: str) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, dict]:
    """transformers' output after o_proj, its weights (eager only), its top-k indices and the state dict."""
    attention, rotary = _module(seed, top_k, implementation)
    x = torch.randn(1, N, HIDDEN, dtype=torch.float64, generator=torch.Generator().manual_seed(100 + seed))
    pos = torch.arange(N)[None]
    causal = torch.tril(torch.ones(N, N, dtype=torch.bool))[None, None]
    mask = causal if implementation == "sdpa" else torch.zeros(1, 1, N, N, dtype=torch.float64).masked_fill(
        ~causal, torch.finfo(torch.float64).min)
    chosen: list[object] = []
    hook = attention.indexer.register_forward_hook(lambda mod, args, out: chosen.append(out))
    with torch.no_grad():
        out, weights = attention(x, rotary(x, pos), mask, position_ids=pos)
    hook.remove()
    sd = {k: v.numpy() for k, v in attention.state_dict().items()}
    sd["X"] = x[0].numpy()
    return out[0].numpy(), None if weights is None else weights[0].numpy(), chosen[0][0].numpy(), sd


def _decisive(sel: Selection, top_k: int) -> None:
    """Each row's k-th and next visible scores far apart: ReLU's zeros tie often (a row of zeros), and torch's topk
    orders ties as it likes, so only draws whose selection no tie or float32 rounding decides are compared."""
    causal = np.tril(np.ones((N, N), dtype=bool))
    for t in range(N):
        row = np.sort(sel.indexed.scores[t][causal[t]])[::-1]
        if len(row) > top_k:
            assert row[top_k - 1] - row[top_k] > 1e-4 * max(1.0, abs(row[top_k - 1])), (t, row)


@pytest.mark.parametrize(("seed", "top_k"), [(2, 2), (3, 2), (4, 3), (5, 3), (4, 6)])
def test_mla_with_the_indexer_matches_transformers_forward(seed: int, top_k: int) -> None:
    out, _, indices, sd = _run(seed, top_k, "sdpa")
    comp = compute(parse_scenario(_scenario(sd, sd["X"], top_k), "deepseek_v32_layer.toml"))
    sel = comp.heads[0].need(Selection)
    _decisive(sel, top_k)
    # transformers' top-k indices: each row's selected keys (a row with fewer visible keys than top_k also
    # lists masked ones, which its causal mask then hides)
    theirs = np.zeros((N, N), dtype=bool)
    for t, keys in enumerate(indices):
        theirs[t, keys] = True
    causal = np.tril(np.ones((N, N), dtype=bool))
    assert np.array_equal(sel.mask, theirs & causal)
    assert sel.indexed.covers_all == (top_k >= N)
    np.testing.assert_allclose(comp.output, out, rtol=FLOAT32, atol=FLOAT32)
    for hr in comp.heads:
        assert np.all(hr.weights[~sel.mask] == 0.0)
        np.testing.assert_allclose(hr.weights.sum(axis=1), 1.0, atol=1e-15)


@pytest.mark.parametrize(("seed", "top_k"), [(2, 2), (4, 3)])
def test_every_heads_weights_match_transformers_eager_softmax(seed: int, top_k: int) -> None:
    _, weights, _, sd = _run(seed, top_k, "eager")
    assert weights is not None
    comp = compute(parse_scenario(_scenario(sd, sd["X"], top_k), "deepseek_v32_layer.toml"))
    _decisive(comp.heads[0].need(Selection), top_k)
    for h, hr in enumerate(comp.heads):
        np.testing.assert_allclose(hr.weights, weights[h], rtol=FLOAT32, atol=FLOAT32)
        assert np.all(weights[h][~hr.need(Selection).mask] == 0.0)
