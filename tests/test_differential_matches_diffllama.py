"""Differential attention (kernels/differential.py) against transformers' own DiffLlamaAttention.

A tiny DiffLlama attention layer is built with transformers' classes and random weights in float64; its weights
are mapped into the per-head form by importers/hf_diffllama_layout.py (transformers pairs query head i with
i + H/2 and builds each pair's values from two heads), every differential head runs through diff_forward, and the
heads' outputs side by side must be what o_proj reads, and times W_O what the module returns, within float64's
rounding. The RoPE cos and sin are transformers' own (its inverse frequencies are computed in float32). The
layer runs transformers' SDPA path: its eager path takes the softmax in float32 (dtype=torch.float32), SDPA keeps
float64.

transformers sums λ_q1·λ_k1 and takes its e^ in float32, so with random λ vectors its λ carries float32's
rounding: there the comparison is to float32's precision. For the float64 comparison the λ vectors are random on
disjoint dimensions (each dot product exactly 0, so e^0 = 1 in either precision and λ = λ_init exactly); the
λ formula itself is checked against torch in float64 by tests/test_differential_backward_torch.py."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import DiffLlamaConfig  # noqa: E402
from transformers.models.diffllama.modeling_diffllama import (  # noqa: E402
    DiffLlamaAttention,
    DiffLlamaRotaryEmbedding,
)

from qkv_tui.core import variants  # noqa: E402
from qkv_tui.core.scenario import _Validator, parse_scenario  # noqa: E402
from qkv_tui.core.variants.differential import TABLE  # noqa: E402
from qkv_tui.importers.hf_diffllama_layout import diffllama_heads  # noqa: E402
from qkv_tui.kernels.attention import Turn  # noqa: E402
from qkv_tui.kernels.differential import DiffForward, DiffHead, diff_forward  # noqa: E402
from qkv_tui.kernels.rope import (  # noqa: E402
    RopeSpec,
    angles,
    angles_at,
    pairs,
)

TOL = 1e-12

def _each_half(turn: Turn | None, W_Q: np.ndarray) -> tuple[RopeSpec, ...]:
    """RoPE's part turning each half of a head (width d = W_Q's columns / 2) on its own, as the head's pass runs it."""
    return () if turn is None else (RopeSpec(turn, W_Q.shape[1] // 2),)



def _layer(heads: int, kv_heads: int, head_dim: int, layer_idx: int, bias: bool, seed: int, orthogonal: bool = True):
    torch.manual_seed(seed)
    hidden = 12
    cfg = DiffLlamaConfig(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
                          head_dim=head_dim, intermediate_size=8, num_hidden_layers=layer_idx + 1,
                          rms_norm_eps=1e-5, attn_implementation="sdpa", attention_bias=bias, lambda_std_dev=0.4)
    att = DiffLlamaAttention(cfg, layer_idx=layer_idx).double().eval()
    if bias:  # nn.Linear's biases start random already; make them large enough to matter
        with torch.no_grad():
            for proj in (att.q_proj, att.k_proj, att.v_proj, att.o_proj):
                proj.bias.normal_(0.0, 0.5)
    if orthogonal:
        half = head_dim // 2
        with torch.no_grad():
            for first, vec in ((True, att.lambda_q1), (False, att.lambda_k1), (False, att.lambda_q2), (True, att.lambda_k2)):
                vec[half:] = 0.0 if first else vec[half:]
                vec[:half] = vec[:half] if first else 0.0
    return cfg, att, DiffLlamaRotaryEmbedding(cfg).double()


def _run(heads: int, kv_heads: int, head_dim: int, layer_idx: int, bias: bool, seed: int, n: int = 6,
         orthogonal: bool = True):
    cfg, att, rot = _layer(heads, kv_heads, head_dim, layer_idx, bias, seed, orthogonal)
    x = torch.randn(1, n, cfg.hidden_size, dtype=torch.float64)
    cos, sin = rot(x, torch.arange(n)[None])
    mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    seen = {}
    hook = att.o_proj.register_forward_pre_hook(lambda _m, args: seen.setdefault("concat", args[0].detach().clone()))
    with torch.no_grad():
        out, _ = att(x, (cos, sin), attention_mask=mask)
    hook.remove()
    return cfg, att, x[0].numpy(), cos[0].numpy(), sin[0].numpy(), seen["concat"][0].numpy(), out[0].numpy()


def _ours(att, X: np.ndarray, cos: np.ndarray, sin: np.ndarray, heads: int, kv_heads: int, head_dim: int,
          bias: bool) -> tuple[list[DiffForward], np.ndarray]:
    """Every differential head of the mapped layer, query head p reading K/V head ⌊p·KV/H⌋ (contracts §7)."""
    w = lambda t: t.detach().numpy()
    biases = (w(att.q_proj.bias), w(att.k_proj.bias), w(att.v_proj.bias)) if bias else (None, None, None)
    lay = diffllama_heads(w(att.q_proj.weight), w(att.k_proj.weight), w(att.v_proj.weight),
                          [w(att.lambda_q1), w(att.lambda_k1), w(att.lambda_q2), w(att.lambda_k2)],
                          heads, kv_heads, head_dim, biases=biases)
    d, n = lay.d, X.shape[0]
    turn = Turn(cos[:, :d // 2], sin[:, :d // 2], pairs("half", d))  # transformers' cat(freqs, freqs): rotate_half
    allow = np.tril(np.ones((n, n), dtype=bool))
    done: dict[int, DiffForward] = {}
    outs = []
    for p in range(lay.num_heads):
        c = p * lay.num_kv_heads // lay.num_heads
        spec = DiffHead(lay.lambda_q1[p], lay.lambda_k1[p], lay.lambda_q2[p], lay.lambda_k2[p], att.lambda_init,
                        att.config.rms_norm_eps)
        f = diff_forward(X, X, lay.W_Q[p], lay.W_K[c], lay.W_V[c], None if lay.b_Q is None else lay.b_Q[p],
                         None if lay.b_K is None else lay.b_K[c], None if lay.b_V is None else lay.b_V[c], allow, spec,
                         parts=_each_half(turn, lay.W_Q[p]), shared=done.get(c))
        done.setdefault(c, f)
        outs.append(f)
    return outs, np.concatenate([f.output for f in outs], axis=1)


@pytest.mark.parametrize(("heads", "kv_heads", "head_dim", "layer_idx", "bias", "seed"), [
    (4, 4, 4, 0, False, 0),  # no sharing: every pair its own K/V head
    (4, 2, 4, 2, False, 1),  # two query heads per K/V head (transformers' num_key_value_groups = 2)
    (8, 2, 4, 1, True, 2),  # four per K/V head, with every projection's bias
    (4, 2, 6, 5, True, 3),  # d = 6: RoPE's three pairs per half
])
def test_heads_and_output_match_diffllama(heads: int, kv_heads: int, head_dim: int, layer_idx: int, bias: bool,
                                          seed: int) -> None:
    _cfg, att, X, cos, sin, concat, out = _run(heads, kv_heads, head_dim, layer_idx, bias, seed)
    outs, ours = _ours(att, X, cos, sin, heads, kv_heads, head_dim, bias)
    assert ours.shape == concat.shape == (X.shape[0], heads * head_dim)
    np.testing.assert_allclose(ours, concat, rtol=0, atol=TOL)
    W_O = att.o_proj.weight.detach().numpy().T  # the heads side by side are already in o_proj's column order
    b_O = att.o_proj.bias.detach().numpy() if bias else 0.0
    np.testing.assert_allclose(ours @ W_O + b_O, out, rtol=0, atol=TOL)
    for f in outs:  # the λ vectors are orthogonal here: λ = 1 − 1 + λ_init, and λ_init is transformers' own
        assert (f.lam.lambda_1, f.lam.lambda_2, f.lam.value) == (1.0, 1.0, att.lambda_init)
        assert f.lam.value == 0.8 - 0.6 * np.exp(-0.3 * layer_idx)


@pytest.mark.parametrize("seed", [6, 7])
def test_random_lambda_vectors_match_to_float32(seed: int) -> None:
    """With λ vectors that do not cancel, λ = e^(λ_q1·λ_k1) − e^(λ_q2·λ_k2) + λ_init is transformers' λ to
    float32's precision (its dot products and e^ are float32), and so are the outputs."""
    _cfg, att, X, cos, sin, concat, _out = _run(4, 2, 4, 1, False, seed, orthogonal=False)
    outs, ours = _ours(att, X, cos, sin, 4, 2, 4, False)
    with torch.no_grad():
        lam = float(torch.exp((att.lambda_q1 * att.lambda_k1).sum()) - torch.exp((att.lambda_q2 * att.lambda_k2).sum())
                    + att.lambda_init)
    assert abs(lam - att.lambda_init) > 0.05  # the vectors move λ away from λ_init
    for f in outs:
        assert f.lam.value == pytest.approx(lam, rel=1e-6)
    np.testing.assert_allclose(ours, concat, rtol=0, atol=1e-5)


def test_transformers_rope_is_the_kernels_rope_for_width_d() -> None:
    """The comparison passes transformers' own cos and sin; they are the kernels' angles for the half width d
    to float32's precision (transformers computes its inverse frequencies in float32)."""
    _, _, _, cos, sin, _, _ = _run(4, 2, 4, 0, False, 4)
    a = angles(10000.0, 4, range(cos.shape[0]))
    np.testing.assert_allclose(cos[:, :2], np.cos(a), atol=1e-6)
    np.testing.assert_allclose(sin[:, :2], np.sin(a), atol=1e-6)


def test_the_wrong_pairing_does_not_match() -> None:
    """The pairing matters: read with the paper's pairing (2i, 2i + 1), the same checkpoint gives other outputs,
    so the match above is the mapping's doing, not a coincidence of the shapes."""
    _cfg, att, X, cos, sin, concat, _ = _run(4, 2, 4, 0, False, 5)
    w = lambda t: t.detach().numpy()
    lay = diffllama_heads(w(att.q_proj.weight), w(att.k_proj.weight), w(att.v_proj.weight),
                          [w(att.lambda_q1), w(att.lambda_k1), w(att.lambda_q2), w(att.lambda_k2)], 4, 2, 4,
                          pairing="paper")
    n, d = X.shape[0], lay.d
    turn = Turn(cos[:, :d // 2], sin[:, :d // 2], pairs("half", d))
    allow = np.tril(np.ones((n, n), dtype=bool))
    spec = DiffHead(lay.lambda_q1[0], lay.lambda_k1[0], lay.lambda_q2[0], lay.lambda_k2[0], att.lambda_init, 1e-5)
    f = diff_forward(X, X, lay.W_Q[0], lay.W_K[0], lay.W_V[0], None, None, None, allow, spec, parts=_each_half(turn, lay.W_Q[0]))
    assert np.abs(f.output - concat[:, :2 * d]).max() > 1e-3


def _toml(M) -> str:
    M = np.asarray(M)
    if M.ndim == 1:
        return "[" + ", ".join(repr(float(x)) for x in M) + "]"
    return "[" + ", ".join(_toml(row) for row in M) + "]"


@pytest.mark.parametrize(("heads", "kv_heads", "bias", "seed"), [(4, 2, False, 8), (8, 4, True, 9)])
def test_a_scenario_of_the_mapped_layer_matches_diffllama(heads: int, kv_heads: int, bias: bool, seed: int) -> None:
    """The chain the importer will use: the mapped layer written as an [attention] scenario with [rope] and a
    [differential] table, read by the loader (which cuts W_K and W_V per K/V head) and by [differential]'s parser,
    each head run with the loader's K/V head and [rope]'s turn for width d, gives transformers' output (the
    layer run with [rope]'s cos and sin: its own rotary module is float32)."""
    head_dim, layer_idx, n = 4, 3, 5
    cfg, att, _ = _layer(heads, kv_heads, head_dim, layer_idx, bias, seed)
    x = torch.randn(1, n, cfg.hidden_size, dtype=torch.float64)
    w = lambda t: t.detach().numpy()
    biases = (w(att.q_proj.bias), w(att.k_proj.bias), w(att.v_proj.bias)) if bias else (None, None, None)
    lay = diffllama_heads(w(att.q_proj.weight), w(att.k_proj.weight), w(att.v_proj.weight),
                          [w(att.lambda_q1), w(att.lambda_k1), w(att.lambda_q2), w(att.lambda_k2)],
                          heads, kv_heads, head_dim, biases=biases)
    lines = [f"tokens = {[f't{i}' for i in range(n)]}".replace("'", '"'), f"X = {_toml(x[0].numpy())}",
             '[mask]\nkind = "causal"', '[rope]\nlayout = "half"\nbase = 10000.0',
             f"[attention]\nnum_heads = {lay.num_heads}\nnum_kv_heads = {lay.num_kv_heads}",
             f"W_Q = {_toml(np.concatenate(lay.W_Q, axis=1))}", f"W_K = {_toml(np.concatenate(lay.W_K, axis=1))}",
             f"W_V = {_toml(np.concatenate(lay.W_V, axis=1))}"]
    if bias:
        assert lay.b_Q is not None and lay.b_K is not None and lay.b_V is not None
        lines += [f"b_Q = {_toml(np.concatenate(lay.b_Q))}", f"b_K = {_toml(np.concatenate(lay.b_K))}",
                  f"b_V = {_toml(np.concatenate(lay.b_V))}"]
    lines.append(f"[output]\nW_O = {_toml(w(att.o_proj.weight).T)}" + (f"\nb_O = {_toml(w(att.o_proj.bias))}" if bias else ""))
    sc = parse_scenario("\n".join(lines) + "\n", "diffllama.toml")
    table = {"lambda_q1": lay.lambda_q1.tolist(), "lambda_k1": lay.lambda_k1.tolist(), "lambda_q2": lay.lambda_q2.tolist(),
             "lambda_k2": lay.lambda_k2.tolist(), "layer": layer_idx, "eps": cfg.rms_norm_eps}
    v = _Validator("diffllama.toml")
    ctx = variants.Context(v, sc.tokens, sc.X.shape[1], False, tuple((f"head {i + 1}", h.d_k) for i, h in enumerate(sc.heads)),
                           sc.mask_kind, sc.allow, {t.key: t.of(sc) for t in variants.TABLES},
                           sc.num_heads_split, sc.num_kv_heads, sc.heads)
    df = TABLE.parse(table, ctx)
    assert df.lambda_init == att.lambda_init
    assert sc.rope is not None and sc.positions is not None
    a = angles_at(sc.rope.inv_freq(df.d), sc.positions)
    turn = Turn(np.cos(a), np.sin(a), sc.rope.pairs(df.d))
    # transformers' rotary module takes its angles in float32; it is given [rope]'s float64 cos and sin instead,
    # laid out as it lays them (cat(freqs, freqs): rotate_half's pairs (i, i + d/2))
    cos, sin = (torch.tensor(np.concatenate([t, t], axis=1))[None] for t in (turn.cos, turn.sin))
    mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    with torch.no_grad():
        out, _ = att(x, (cos, sin), attention_mask=mask)
    done: dict[int, DiffForward] = {}
    outs = []
    for h, head in enumerate(sc.heads):
        c = sc.kv_head(h)
        f = diff_forward(sc.X, sc.X, head.W_Q, head.W_K, head.W_V, head.b_Q, head.b_K, head.b_V, sc.allow, df.head(h),
                         scale=sc.scale, parts=_each_half(turn, head.W_Q), shared=done.get(c))
        done.setdefault(c, f)
        outs.append(f.output)
    assert sc.W_O is not None
    final = np.concatenate(outs, axis=1) @ sc.W_O + (0.0 if sc.b_O is None else sc.b_O)
    np.testing.assert_allclose(final, out[0].numpy(), rtol=0, atol=TOL)
