"""The lightning indexer (qkv_tui/kernels/indexer.py) against transformers' own indexer modules, and its promises.

transformers' ``DeepseekV32Indexer`` and ``GlmMoeDsaIndexer`` are built on tiny configs with their own classes
and run in float64, with the float64 cos/sin of qkv_tui's RoPE passed in as their position embeddings. Their
forward casts q and k to float32 before the scores (``q.float()``), so the scores agree to float32 noise
(checked at 1e-5 relative), not float64's; the selection is compared where the k-th and the next score are
further apart than that noise.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui.kernels.indexer import IndexerWeights, index, select_top_k
from qkv_tui.kernels.policy import ByHand
from qkv_tui.kernels.rope import angles, columns

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


class _Record(torch.overrides.TorchFunctionMode):
    """Keeps the tensor transformers' indexer takes the top-k of: its index scores, −inf where masked."""

    def __init__(self) -> None:
        super().__init__()
        self.scores: object = None

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is torch.Tensor.topk:
            self.scores = args[0].detach().clone()
        return func(*args, **(kwargs or {}))


def _indexer(model: str, d_model: int, d_cq: int, heads: int, d_I: int, rope: int, top_k: int):  # type: ignore[no-untyped-def]
    if model == "deepseek_v32":
        from transformers import DeepseekV32Config as Config
        from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Indexer as Indexer
    else:
        from transformers import GlmMoeDsaConfig as Config
        from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import GlmMoeDsaIndexer as Indexer
    cfg = Config(hidden_size=d_model, q_lora_rank=d_cq, qk_rope_head_dim=rope, qk_nope_head_dim=2, index_head_dim=d_I,
                 index_n_heads=heads, index_topk=top_k, num_attention_heads=2, num_hidden_layers=1, vocab_size=10,
                 kv_lora_rank=4, v_head_dim=4)
    torch.manual_seed(0)
    module = Indexer(cfg, 0).double()
    with torch.no_grad():  # a LayerNorm whose gain and bias are not 1 and 0, so both are checked
        module.k_norm.weight.uniform_(0.5, 1.5)
        module.k_norm.bias.uniform_(-0.5, 0.5)
    return module


@pytest.mark.parametrize(("model", "layout"), [("deepseek_v32", "half"), ("glm_moe_dsa", "interleaved")])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_index_scores_and_selection_match_transformers(model: str, layout: str, seed: int) -> None:
    n, d_model, d_cq, H, d_I, rope, top_k = 7, 8, 6, 3, 6, 4, 3
    module = _indexer(model, d_model, d_cq, H, d_I, rope, top_k)
    rng = np.random.default_rng(seed)
    X, c_Q = rng.normal(size=(n, d_model)), rng.normal(size=(n, d_cq))
    allow = np.tril(np.ones((n, n), dtype=bool))
    positions = np.arange(n)
    a = angles(10000.0, rope, positions)  # (n, rope/2): transformers' cos/sin are cat(freqs, freqs)
    factor = 1.0 + 0.15 * seed  # YaRN's attention factor, in the cos and sin transformers passes the indexer
    cos, sin = (torch.tensor(np.concatenate([f(a), f(a)], axis=1) * factor)[None] for f in (np.cos, np.sin))
    record = _Record()
    with record, torch.no_grad():
        picked = module(torch.tensor(X)[None], torch.tensor(c_Q)[None], (cos, sin), torch.tensor(allow)[None],
                        torch.tensor(positions)[None])
    theirs = record.scores[0].double().numpy()  # type: ignore[attr-defined]

    weights = IndexerWeights(H, module.wq_b.weight.detach().numpy().T, module.wk.weight.detach().numpy().T,
                             module.weights_proj.weight.detach().numpy().T, top_k,
                             module.k_norm.weight.detach().numpy(), module.k_norm.bias.detach().numpy(), 1e-6)
    ours = index(X, weights, allow, q_source=c_Q, turn=columns(rope, layout, positions, factor=factor))

    assert np.array_equal(np.isinf(ours.scores), np.isinf(theirs))
    seen = np.isfinite(theirs)
    np.testing.assert_allclose(ours.scores[seen], theirs[seen], rtol=1e-5, atol=1e-6)
    chosen = np.zeros((n, n), dtype=bool)
    np.put_along_axis(chosen, picked[0].long().numpy(), True, axis=1)
    chosen &= allow  # torch's topk fills a row with fewer visible keys than top_k with hidden ones
    for t in range(n):
        visible = np.sort(ours.scores[t][allow[t]])[::-1]
        if len(visible) > top_k and visible[top_k - 1] - visible[top_k] < 1e-4:
            continue  # a near tie at the cut, inside transformers' float32 noise
        assert np.array_equal(ours.selected[t], chosen[t]), (t, ours.scores[t], theirs[t])


def test_each_score_is_the_sum_of_its_terms_with_the_models_scales() -> None:
    """I[t,s] = Σ_j w[t,j]·ReLU(q_I[t,j]·k_I[s]), w = X·W_w / √(H_I·d_I), worked from the kernel's own q and k."""
    rng = np.random.default_rng(5)
    n, d_model, H, d_I = 5, 4, 2, 4
    w = IndexerWeights(H, rng.normal(size=(d_model, H * d_I)), rng.normal(size=(d_model, d_I)),
                       rng.normal(size=(d_model, H)), 2)
    X = rng.normal(size=(n, d_model))
    allow = np.tril(np.ones((n, n), dtype=bool))
    out = index(X, w, allow)
    for t in range(n):
        for s in range(n):
            if not allow[t, s]:
                assert out.scores[t, s] == -np.inf and not out.selected[t, s]
                continue
            total = 0.0
            for j in range(H):
                q = X[t] @ w.W_q[:, j * d_I:(j + 1) * d_I]
                total += (X[t] @ w.W_w[:, j]) / np.sqrt(H * d_I) * max(float(q @ (X[s] @ w.W_k)), 0.0)
            assert out.scores[t, s] == pytest.approx(total, rel=1e-12, abs=1e-12)


def test_ties_go_to_the_earlier_key() -> None:
    scores = np.array([[1.0, 2.0, 2.0, 2.0, 0.5]])
    allow = np.ones((1, 5), dtype=bool)
    assert select_top_k(scores, allow, 2).tolist() == [[False, True, True, False, False]]
    assert select_top_k(np.zeros((1, 4)), np.ones((1, 4), dtype=bool), 1).tolist() == [[True, False, False, False]]
    hidden = np.array([[False, True, True, True, True]])  # a hidden key never wins, whatever its score
    assert select_top_k(np.array([[9.0, 0.0, 0.0, 1.0, 0.0]]), hidden, 2).tolist() == [[False, True, False, True, False]]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 7), d_model=st.integers(1, 5), heads=st.integers(1, 3), half_I=st.integers(1, 3),
       rope_pairs=st.integers(0, 3), layout=st.sampled_from(["half", "interleaved"]), seed=st.integers(0, 2**16),
       norm=st.booleans(), extra=st.integers(0, 3))
def test_top_k_covering_every_visible_key_gives_the_causal_mask(n: int, d_model: int, heads: int, half_I: int,
                                                                rope_pairs: int, layout: str, seed: int, norm: bool,
                                                                extra: int) -> None:
    d_I = 2 * half_I
    rope = 2 * min(rope_pairs, half_I)
    rng = np.random.default_rng(seed)
    w = IndexerWeights(heads, rng.normal(size=(d_model, heads * d_I)), rng.normal(size=(d_model, d_I)),
                       rng.normal(size=(d_model, heads)), n + extra,
                       rng.normal(size=d_I) if norm else None, rng.normal(size=d_I) if norm else None)
    X = rng.normal(size=(n, d_model))
    allow = np.tril(np.ones((n, n), dtype=bool))
    turn = columns(rope, layout, range(n))
    out = index(X, w, allow, turn=turn)
    assert out.scores.shape == out.selected.shape == (n, n)
    assert np.array_equal(out.selected, allow) and out.covers_all and not out.dropped.any()
    assert np.array_equal(np.isinf(out.scores), ~allow)
    small = index(X, IndexerWeights(heads, w.W_q, w.W_k, w.W_w, 1, w.k_gamma, w.k_beta), allow, turn=turn)
    assert (small.selected.sum(axis=1) == 1).all()  # every query keeps exactly one key
    assert np.array_equal(small.selected | small.dropped, allow) and not (small.selected & small.dropped).any()
    best = np.argmax(small.scores, axis=1)  # argmax takes the first of equal maxima: the earlier key
    assert small.selected[np.arange(n), best].all()


def test_by_hand_policy_rounds_the_scores_it_writes_down() -> None:
    rng = np.random.default_rng(3)
    w = IndexerWeights(2, rng.normal(size=(3, 4)), rng.normal(size=(3, 2)), rng.normal(size=(3, 2)), 2)
    X = rng.normal(size=(4, 3))
    allow = np.tril(np.ones((4, 4), dtype=bool))
    turn = columns(2, "half", range(4))
    exact, hand = index(X, w, allow, turn=turn), index(X, w, allow, turn=turn, policy=ByHand(2))
    seen = np.isfinite(hand.scores)
    assert np.array_equal(hand.scores[seen], np.round(hand.scores[seen], 2))
    assert np.array_equal(hand.w, np.round(hand.w, 2)) and hand.root == 2.0  # √(H_I·d_I) = √(2·2)
    assert np.abs(hand.scores[seen] - exact.scores[seen]).max() < 0.2


@settings(max_examples=12, deadline=None)
@given(model=st.sampled_from([("deepseek_v32", "half"), ("glm_moe_dsa", "interleaved")]), n=st.integers(1, 6),
       heads=st.integers(1, 3), half_I=st.integers(1, 3), rope_pairs=st.integers(1, 3), top_k=st.integers(1, 7),
       seed=st.integers(0, 2**16))
def test_index_scores_match_transformers_over_shapes(model: tuple[str, str], n: int, heads: int, half_I: int,
                                                     rope_pairs: int, top_k: int, seed: int) -> None:
    """The scores of transformers' indexer (float32 inside, see the module's docstring) over shapes and top_k."""
    d_I, d_model, d_cq = 2 * half_I, 5, 3
    rope = 2 * min(rope_pairs, half_I)
    module = _indexer(model[0], d_model, d_cq, heads, d_I, rope, top_k)
    rng = np.random.default_rng(seed)
    X, c_Q = rng.normal(size=(n, d_model)), rng.normal(size=(n, d_cq))
    allow = np.tril(np.ones((n, n), dtype=bool))
    a = angles(10000.0, rope, list(range(n)))
    cos, sin = (torch.tensor(np.concatenate([f(a), f(a)], axis=1))[None] for f in (np.cos, np.sin))
    record = _Record()
    with record, torch.no_grad():
        module(torch.tensor(X)[None], torch.tensor(c_Q)[None], (cos, sin), torch.tensor(allow)[None],
               torch.arange(n)[None])
    theirs = record.scores[0].double().numpy()  # type: ignore[attr-defined]
    weights = IndexerWeights(heads, module.wq_b.weight.detach().numpy().T, module.wk.weight.detach().numpy().T,
                             module.weights_proj.weight.detach().numpy().T, top_k,
                             module.k_norm.weight.detach().numpy(), module.k_norm.bias.detach().numpy())
    ours = index(X, weights, allow, q_source=c_Q, turn=columns(rope, model[1], range(n)))
    seen = np.isfinite(theirs)
    assert np.array_equal(seen, allow)
    np.testing.assert_allclose(ours.scores[seen], theirs[seen], rtol=1e-5, atol=1e-6)
    assert (ours.selected.sum(axis=1) == np.minimum(allow.sum(axis=1), top_k)).all()


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 7), top_k=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_sparse_attention_is_full_attention_when_top_k_covers_the_visible_keys(n: int, top_k: int, seed: int) -> None:
    """Attention over the selected keys (kernels/softmax) is full causal attention exactly when nothing is dropped;
    otherwise every dropped key has weight 0 and the kept ones renormalise."""
    from qkv_tui.kernels.softmax import masked_logits, softmax_rows

    rng = np.random.default_rng(seed)
    w = IndexerWeights(2, rng.normal(size=(3, 4)), rng.normal(size=(3, 2)), rng.normal(size=(3, 2)), top_k)
    X = rng.normal(size=(n, 3))
    allow = np.tril(np.ones((n, n), dtype=bool))
    out = index(X, w, allow)
    S = rng.normal(size=(n, n))  # any attention logits
    full = softmax_rows(masked_logits(S, allow)).weights
    sparse = softmax_rows(masked_logits(S, out.attend)).weights
    assert out.covers_all == (top_k >= n)
    if out.covers_all:
        assert np.array_equal(sparse, full)
    assert not sparse[out.dropped].any()
    np.testing.assert_allclose(sparse.sum(axis=1), 1.0, rtol=1e-12)
