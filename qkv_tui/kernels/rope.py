"""RoPE (Su et al., RoFormer): which dimensions turn together, how fast, and the turn itself (docs/scenario-format.md, [rope])."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.kernels.attention import HeadPass, PartSpec, Turn, frozen
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix


def pairs(layout: str, d_k: int) -> list[tuple[int, int]]:
    """The dimensions rotated together, pair i first: what makes the two layouts differ.

    "interleaved" (the paper's, GPT-J): pair i = (2i, 2i+1); "half" (LLaMA's, GPT-NeoX): (i, i + d_k/2)."""
    half = d_k // 2
    if layout == "interleaved":
        return [(2 * i, 2 * i + 1) for i in range(half)]
    return [(i, i + half) for i in range(half)]


def theta(base: float, i: int, d_k: int) -> float:
    """Frequency of pair i, base^(−2i/d_k): angles grow by this much per position."""
    return float(base ** (-2.0 * i / d_k))


def angles(base: float, d_k: int, positions: Sequence[int] | Matrix) -> Matrix:
    """p·θᵢ for every row's position p and pair i: (rows, d_k/2)."""
    thetas = np.array([theta(base, i, d_k) for i in range(d_k // 2)], dtype=np.float64)  # (d_k/2,)
    return angles_at(thetas, positions)


def angles_at(thetas: Matrix, positions: Sequence[int] | Matrix) -> Matrix:
    """p·θᵢ for every row's position p and each given frequency (scaled ones too): (rows, len(thetas))."""
    p = np.asarray(positions, dtype=np.float64)  # (rows,)
    out: Matrix = p[:, None] * thetas[None, :]
    return out


def rotate(M: Matrix, cos: Matrix, sin: Matrix, turned: Sequence[tuple[int, int]], policy: Policy = EXACT) -> Matrix:
    """Each pair (a, b) of row r turns by the angle whose cos and sin are cos[r, i], sin[r, i]: (rows, d_k).

    Dimensions in no pair (partial rotary: those from r on) pass through as they are.

    ``cos`` and ``sin`` (rows, d_k/2) are kept as the policy keeps a worked number (by hand: written down
    rounded), and so is each product; the turned matrix is a table."""
    cos, sin = policy.worked(cos), policy.worked(sin)
    out = M.copy()  # (rows, d_k)
    # every pair at once, column i of cos and sin for pair i: the same products and sums as pair by pair
    # (a real model's earlier layers turn hundreds of heads, where a loop over pairs was most of their time)
    first, second = [a for a, _ in turned], [b for _, b in turned]
    cos_p, sin_p = cos[:, : len(turned)], sin[:, : len(turned)]  # (rows, pairs)
    Ma, Mb = M[:, first], M[:, second]  # (rows, pairs)
    out[:, first] = policy.worked(Ma * cos_p) - policy.worked(Mb * sin_p)
    out[:, second] = policy.worked(Ma * sin_p) + policy.worked(Mb * cos_p)
    return policy.table(out)


def turn(M: Matrix, layout: str, base: float, positions: Sequence[int] | Matrix, policy: Policy = EXACT) -> Matrix:
    """RoPE on the rows of M (rows, d_k), row r at ``positions[r]``."""
    d_k = M.shape[1]
    a = angles(base, d_k, positions)  # (rows, d_k/2)
    return rotate(M, np.cos(a), np.sin(a), pairs(layout, d_k), policy)


@fixed
class Rotated:
    """RoPE's record of one head ([rope]): Q and K turned by position."""

    Q_rot: Matrix  # (n, d_k)
    K_rot: Matrix  # (m, d_k)
    turn: Turn | None = None  # the cos and sin it turned by (for a block's width where ``block`` is set)
    block: int | None = None  # the width of each block of columns turned on its own; None: the whole d_k

    # the views' names of the Queries and Keys as scored (core/part_questions.scored_suffix, scored_word)
    scored_suffix: ClassVar[str] = "_rot"
    scored_word: ClassVar[str] = "rotated"
    scored_mark: ClassVar[str] = "'"  # Q', K' in the arithmetic
    back_suffix: ClassVar[str] = "_t"  # dQ_t, dK_t: the gradient at Q and K before the turn (teach/stages/grads.py)
    # how the cache view writes a projection this part turns: all rows, and one token's row at its position; what
    # the Score stage says of a score of turned vectors, and the worksheet of where the turned K is
    words: ClassVar[Mapping[str, str]] = MappingProxyType({
        "cache.Q": "RoPE({text})", "cache.K": "RoPE({text})",
        "cache.Q.at": "rotate({text}, position {position})", "cache.K.at": "rotate({text}, position {position})",
        "score.distance": "both vectors are rotated by their own position, so position enters this score only through"
                          " the distance {query} − {key} = {distance}; the vectors themselves decide the rest",
        "worksheet.kv_reader": " (and K' in its Rotate section)",  # where a K/V reader's K is, after its Project's
        # what a worksheet with no tables for a head that scores in blocks says it is missing ({block}: "half")
        "worksheet.blocks": "[rope] (each {block} turned on its own)",
    })

    @property
    def Q_after(self) -> Matrix:
        """The Queries as this part leaves them: what is scored."""
        return self.Q_rot

    def overflow(self, stage: str, at: Any) -> tuple[str, str, str] | None:
        """Q and K turned, past float64 (core/part_questions.py)."""
        if stage != "turned":
            return None
        said: tuple[str, str, str] | None = at.named((("Q_rot", self.Q_rot, False, False, "expected smaller Q"),
                         ("K_rot", self.K_rot, True, False, "expected smaller K")))
        return said

    @property
    def K_after(self) -> Matrix:
        return self.K_rot

    def scored_back(self, dQ_rot: Matrix, dK_rot: Matrix, policy: Policy = EXACT) -> tuple[Matrix, Matrix]:
        """The gradients at Q and K before the turn from those at the turned ones: each block turned back on its
        own by the opposite angle, −sin (kernels/rope_backward.py rotate_back's turn; a part that scores the head in
        blocks reads its gradients back through this)."""
        t = self.turn
        assert t is not None

        def back(dM: Matrix) -> Matrix:
            width = dM.shape[1] if self.block is None else self.block
            blocks = [dM[:, i:i + width] for i in range(0, dM.shape[1], width)]
            return np.concatenate([rotate(b, t.cos, -t.sin, t.pairs, policy) for b in blocks], axis=1)
        return back(dQ_rot), back(dK_rot)


@fixed
class RopeSpec(PartSpec):
    """RoPE as a part of a head's forward pass: it turns the Queries and Keys as the parts before it left them
    (normalised where the head has QK-norm); a head sharing an earlier head's K/V head reuses its turned Keys."""

    turn: Turn
    block: int | None = None  # the width of each block of columns a score reads, turned on its own; None: d_k

    def turned(self, M: Matrix, policy: Policy) -> Matrix:
        t = self.turn
        if self.block is None:
            return frozen(rotate(M, t.cos, t.sin, t.pairs, policy))
        blocks = [M[:, i:i + self.block] for i in range(0, M.shape[1], self.block)]
        return frozen(np.concatenate([rotate(b, t.cos, t.sin, t.pairs, policy) for b in blocks], axis=1))

    def before_score(self, p: HeadPass) -> None:
        earlier = p.shared_part(Rotated)
        if earlier is not None:
            K_rot = earlier.K_rot
        elif p.K_given:  # turned by the layer that computed them
            K_rot = p.K_turned
        else:
            K_rot = self.turned(p.K_turned, p.policy)
        Q_rot = self.turned(p.Q_turned, p.policy)
        p.Q_used, p.K_used = Q_rot, K_rot
        p.records.append(Rotated(Q_rot, K_rot, self.turn, self.block))


def columns(width: int, layout: str, positions: Sequence[int] | Matrix, base: float = 10000.0,
            thetas: Matrix | None = None, factor: float = 1.0) -> RopeSpec | None:
    """RoPE's turn of the first ``width`` columns of another part's vectors (the DSA indexer's q_I and k_I: the
    models' qk_rope_head_dim), in that part's own ``layout``, each row at its token's position: frequencies
    base^(−2i/width), or ``thetas`` where the main attention's RoPE scales them, and ``factor`` (YaRN's) multiplying
    cos and sin; the other columns pass through. None where ``width`` is 0: nothing turns."""
    if not width:
        return None
    a = angles(base, width, positions) if thetas is None else angles_at(thetas, positions)  # (rows, width/2)
    return RopeSpec(Turn(np.cos(a) * factor, np.sin(a) * factor, pairs(layout, width)))
