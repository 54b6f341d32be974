"""DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, GLM-5): which keys each query attends to.

A few index heads score every visible key for every query, I[t,s] = Σ_j w[t,j]·ReLU(q_I[t,j]·k_I[s]),
with one index key k_I per token shared by the heads; each query keeps its top_k keys and the attention
masks the rest (contracts §15, [indexer]).

What follows the models' own code (transformers ``DeepseekV32Indexer`` and ``GlmMoeDsaIndexer``, 5.x):

- q_I = c·W_q, c being X or, as the models do, [mla]'s query latent c_Q (q_a_layernorm(q_a_proj(x)));
  k_I = LayerNorm(X·W_k) (the LayerNorm ``k_norm`` has a gain and a bias, eps 1e-6); w = X·W_w.
- Only the first columns of each index head's q_I and of k_I turn (the models' qk_rope_head_dim, the
  frequencies of the main attention's RoPE); the rest pass through. The turn is RoPE's, given to ``index`` as
  a step on the rows (kernels/rope.py columns). DeepSeek-V3.2 turns them in the
  half-split layout (pair i = (i, i + r/2)), GLM-5 in interleaved pairs (2i, 2i + 1). transformers writes
  GLM's turned pairs out as [evens | odds], a reordering that q_I and k_I share, so every q_I·k_I and
  every score is the one an in-place interleaved turn gives; here the pairs stay where they are.
- The scales: transformers multiplies q_I·k_I by d_I^(−1/2) before the ReLU and w by H_I^(−1/2);
  DeepSeek-V3.2's reference code (inference/model.py) folds both into w. ReLU(c·x) = c·ReLU(x) for
  c > 0, so they agree; here w carries both, w = X·W_w / √(H_I·d_I), so that I is Σ_j w·ReLU(q·k)
  exactly as the report writes it. The reference's Hadamard rotation of q and k and its FP8 scoring
  leave the dot products as they are (transformers drops them too).
- Select: torch's topk leaves the order of equal scores unspecified; here a tie goes to the earlier key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from qkv_tui.kernels.norm import normalise
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix

BoolMatrix = npt.NDArray[np.bool_]
INDEX_LAYOUTS = ("half", "interleaved")  # DeepSeek-V3.2's, GLM-5's
DEFAULT_K_EPS = 1e-6  # the models' nn.LayerNorm(index_head_dim, eps=1e-6)


class Turns(Protocol):
    """A step by position on the index vectors, given by the part that owns it (RoPE's turn of their first
    columns, kernels/rope.py columns): each row of M at its token's position."""

    def turned(self, M: Matrix, policy: Policy) -> Matrix: ...


@dataclass(frozen=True, eq=False)
class IndexerWeights:
    """One layer's indexer: its projections and the index key's LayerNorm."""

    num_heads: int  # H_I
    W_q: Matrix  # (d_src, H_I·d_I): d_src = d_model (from X) or d_cq (from [mla]'s c_Q); head h's columns h·d_I…
    W_k: Matrix  # (d_model, d_I): the one index key shared by the index heads
    W_w: Matrix  # (d_model, H_I): each index head's weight for each query
    top_k: int
    k_gamma: Matrix | None = None  # (d_I,) LayerNorm gain; None with k_beta None: no k_norm
    k_beta: Matrix | None = None  # (d_I,) LayerNorm bias
    k_eps: float = DEFAULT_K_EPS

    @property
    def d_index(self) -> int:
        return int(self.W_k.shape[1])

    @property
    def k_norm(self) -> bool:
        return self.k_gamma is not None or self.k_beta is not None


@dataclass(frozen=True, eq=False)
class Indexed:
    """Every number of the index and the selection, as the policy kept it."""

    q: Matrix  # (H_I, n, d_I) each index head's query before the turn
    k: Matrix  # (n, d_I) X·W_k
    k_normed: Matrix  # (n, d_I) after k_norm (k itself without it)
    q_turned: Matrix  # (H_I, n, d_I) as the step by position left them (their first columns turned); q without it
    k_turned: Matrix  # (n, d_I)
    w_raw: Matrix  # (n, H_I) X·W_w
    root: float  # √(H_I·d_I) as written down: w = w_raw / root
    w: Matrix  # (n, H_I)
    dots: Matrix  # (H_I, n, n) q_I[t,j]·k_I[s], every pair (the causal mask is applied to the sum)
    relu: Matrix  # (H_I, n, n) ReLU of the dots
    terms: Matrix  # (H_I, n, n) w[t,j]·ReLU(q_I[t,j]·k_I[s]): each a cell of the Index stage
    scores: Matrix  # (n, n) I[t,s] = Σ_j terms; −∞ where the mask hides the key
    selected: BoolMatrix  # (n, n) the top_k visible keys of each query; False where the mask hides the key
    dropped: BoolMatrix  # (n, n) visible but not selected: what the sparse attention masks besides the causal mask
    allow: BoolMatrix  # (n, n) the mask the indexer was given
    top_k: int

    @property
    def attend(self) -> BoolMatrix:
        """The mask the sparse attention uses: the selected keys (a subset of the given mask)."""
        return self.selected

    def fields(self) -> dict[str, Matrix | BoolMatrix]:
        """What the JSON export's ``"indexer"`` carries (contracts §15); the export writes its own −∞ rule."""
        return {"scores": self.scores, "selected": self.selected}

    def overflow(self, stage: str, at: Any) -> tuple[str, str, str] | None:
        """Its numbers past float64, in the order the Index stage works them, before any head projects
        (core/part_questions.py): a score of −∞ or NaN where the key is visible would pass for a masked key."""
        if stage != "latent":
            return None
        def per_row(a: Matrix) -> Matrix:  # (H_I, n, ·) → (n, H_I, ·): the place names the query's row
            return a.transpose(1, 0, 2)

        said: tuple[str, str, str] | None = at.named((
            ("[indexer]'s q_I", per_row(self.q_turned), False, False, "expected smaller X (or c_Q) or W_q"),
            ("[indexer]'s k_I", self.k_turned, False, False, "expected smaller X or W_k"),
            ("[indexer]'s w", self.w, False, False, "expected smaller X or W_w"),
            ("[indexer]'s q_I·k_I", per_row(self.dots), False, False, "expected smaller X, W_q or W_k"),
            ("[indexer]'s terms w·ReLU(q_I·k_I)", per_row(self.terms), False, False, "expected smaller X, W_w, W_q or W_k"),
            ("[indexer]'s scores", np.where(self.allow, self.scores, 0.0), False, True,
             "expected smaller X, W_w, W_q or W_k"),
        ))
        return said

    @property
    def covers_all(self) -> bool:
        """top_k ≥ every query's visible keys: the selection is the given mask, and the attention full attention."""
        return bool(not self.dropped.any())


def select_top_k(scores: Matrix, allow: BoolMatrix, top_k: int) -> BoolMatrix:
    """Each row's ``top_k`` highest scores among its visible keys, a tie going to the earlier key: (n, m)."""
    n, m = scores.shape
    ranked = np.where(allow, scores, -np.inf)
    # a stable sort of the negated scores keeps equal scores in key order; hidden keys sort after every visible one
    order = np.lexsort((np.arange(m)[None, :].repeat(n, axis=0), ~allow, -ranked), axis=1)  # (n, m)
    keep = np.zeros((n, m), dtype=bool)
    rows = np.arange(n)[:, None]
    keep[rows, order[:, :top_k]] = True
    out: BoolMatrix = keep & allow
    return out


def index(X: Matrix, weights: IndexerWeights, allow: BoolMatrix, q_source: Matrix | None = None,
          turn: Turns | None = None, policy: Policy = EXACT) -> Indexed:
    """The indexer on X (n, d_model): scores, selection and every number between.

    ``q_source`` is what W_q reads (X when None; [mla]'s c_Q as the models do). ``turn`` is the step by position
    on q_I and k_I (RoPE's turn of their first columns, its cos and sin with YaRN's factor in them: transformers
    passes the indexer the main attention's); None: they do not turn."""
    H, d_I = weights.num_heads, weights.d_index
    n = X.shape[0]
    src = X if q_source is None else q_source
    q_wide = policy.table(policy.matmul(src, weights.W_q))  # (n, H·d_I)
    q = np.stack([q_wide[:, h * d_I:(h + 1) * d_I] for h in range(H)])  # (H, n, d_I)
    k = policy.table(policy.matmul(X, weights.W_k))  # (n, d_I)
    k_normed = k
    if weights.k_norm:
        gamma = weights.k_gamma if weights.k_gamma is not None else np.ones(d_I)
        k_normed = normalise(policy, "layer", k, gamma, weights.k_beta, weights.k_eps).X_norm
    if turn is not None:
        q_turned = np.stack([turn.turned(q[h], policy) for h in range(H)])
        k_turned = turn.turned(k_normed, policy)
    else:
        q_turned, k_turned = q, k_normed
    w_raw = policy.table(policy.matmul(X, weights.W_w))  # (n, H)
    root = policy.divisor(float(np.sqrt(H * d_I)))
    w = policy.table(policy.worked(w_raw / root))  # (n, H)
    dots = np.stack([policy.table(policy.matmul(q_turned[h], k_turned.T)) for h in range(H)])  # (H, n, n)
    relu = np.maximum(dots, 0.0)
    terms = policy.worked(w.T[:, :, None] * relu)  # (H, n, n)
    total = policy.worked(terms.sum(axis=0)) if H > 1 else terms[0]
    scores = np.where(allow, policy.table(total), -np.inf)  # (n, n)
    selected = select_top_k(scores, allow, weights.top_k)
    dropped = allow & ~selected
    assert q.shape == (H, n, d_I)
    return Indexed(q, k, k_normed, q_turned, k_turned, w_raw, root, w, dots, relu, terms, scores, selected, dropped,
                   allow, weights.top_k)
