"""MLA at decode, expanded against absorbed: the cost view's figures of the latent layer's two forms (its own page,
display/mla_cost.py), each a formula with its numbers (core/cost.py's Figure)."""

from __future__ import annotations

from dataclasses import dataclass

from qkv_tui.core.cost import Figure, fig, term


@dataclass(frozen=True)
class MlaDecode:
    expanded: Figure  # FLOPs of one decode step re-expanding every cached latent
    absorbed: Figure  # FLOPs of one step with W_UK and W_UV folded into the query and the output
    crossover: int  # the least context at which the absorbed form costs no more than the expanded


def mla_decode(h: int, d_c: int, d_nope: int, d_v: int, N: int, qk: tuple[str, int], cached: tuple[str, int]) -> MlaDecode:
    """Expanded: k_C = c_KV·W_UK and v_C = c_KV·W_UV for all N cached tokens, then scores and mix per head.
    Absorbed: q_L = q_C·W_UKᵀ once, scores against c_KV (and k_R), the weights mix c_KV, then ·W_UV once.
    ``qk`` is a head's query and key width, ``cached`` a token's row of the cache, [c_KV | k_R], each with the
    formula that names it (core/variants/mla.py)."""
    expanded = fig(term("expand K", ("2", 2), ("N", N), ("d_c", d_c), ("h", h), ("d_nope", d_nope)),
                   term("expand V", ("2", 2), ("N", N), ("d_c", d_c), ("h", h), ("d_v", d_v)),
                   term("scores", ("2", 2), ("h", h), ("N", N), qk),
                   term("mix", ("2", 2), ("h", h), ("N", N), ("d_v", d_v)))
    absorbed = fig(term("q·W_UKᵀ", ("2", 2), ("h", h), ("d_nope", d_nope), ("d_c", d_c)),
                   term("scores", ("2", 2), ("h", h), ("N", N), cached),
                   term("mix", ("2", 2), ("h", h), ("N", N), ("d_c", d_c)),
                   term("·W_UV", ("2", 2), ("h", h), ("d_c", d_c), ("d_v", d_v)))
    fixed = 2 * h * d_c * (d_nope + d_v)  # the absorbed form's two folds, whatever the context
    # the absorbed scores read the cached row and the mix the latent, d_c + (d_c + d_rope) a key
    grows = (2 * d_c * h * (d_nope + d_v) + 2 * h * qk[1] + 2 * h * d_v) - 2 * h * (d_c + cached[1])
    crossover = max(1, -(-fixed // grows)) if grows > 0 else 0  # 0: the absorbed form never catches up
    return MlaDecode(expanded, absorbed, crossover)


