"""MLA's decoupled RoPE (DeepSeek-V2 §2.1.3; transformers' qk_rope_head_dim): the rotary columns of the latent
layer, each head's q_R and the one key k_R every head shares, turned by position through RoPE's kernels
(kernels/rope.py) and turned back (kernels/rope_backward.py). The latent layer's kernels (kernels/mla.py,
kernels/mla_backward.py) are handed a Rotary and never turn anything themselves; [mla]'s table makes it
(core/variants/mla.py, ``rotation``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from qkv_tui.kernels.attention import Turn, frozen
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.rope import rotate
from qkv_tui.kernels.rope_backward import rotate_back
from qkv_tui.kernels.stats import Matrix

if TYPE_CHECKING:
    from qkv_tui.kernels.mla import MlaWeights


def rotary_width(w: MlaWeights) -> int:
    """d_rope: the columns of each head's q_R and of the shared k_R, as many as W_KR's."""
    return int(w.W_KR.shape[1])


@dataclass(frozen=True, eq=False)
class Rotary:
    """How the rotary columns turn: RoPE's cos and sin at each token's position, or not at all (no [rope])."""

    turn: Turn | None

    @property
    def turns(self) -> bool:
        return self.turn is not None

    def turned(self, M: Matrix, policy: Policy = EXACT) -> Matrix:
        """q_R' or k_R' from q_R or k_R (n, d_rope); the same matrix where nothing turns."""
        t = self.turn
        return M if t is None else frozen(rotate(M, t.cos, t.sin, t.pairs, policy))

    def turned_back(self, dM: Matrix, policy: Policy = EXACT) -> Matrix:
        """The gradient at q_R or k_R from the gradient at the turned one: the opposite turn."""
        t = self.turn
        return dM if t is None else rotate_back(dM, t.cos, t.sin, t.pairs, policy)
