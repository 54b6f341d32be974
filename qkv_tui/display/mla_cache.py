"""What the KV-cache view shows of latent attention ([mla]): the cache holds each token's latent c_KV and its
shared rotary key k_R' (d_c + d_rope numbers for every head together), and each head's K and V are expanded
from those rows (the absorbed form never expands them at all: the Absorb stage)."""

from __future__ import annotations

import numpy as np

from qkv_tui.core.engine import Computation
from qkv_tui.core.scenario import Matrix
from qkv_tui.core.variants import Mla
from qkv_tui.kernels.mla import MlaHead


def _mla(comp: Computation) -> Mla:
    mla = comp.scenario.mla
    assert mla is not None
    return mla


def latent_rows(comp: Computation) -> Matrix:
    """(n, d_c + d_rope) what the cache keeps per token: [c_KV | k_R'], the same for every head."""
    m = comp.heads[0].part(MlaHead)
    assert m is not None
    return np.concatenate([m.shared.c_KV, m.shared.k_R], axis=1)


def latent_title(comp: Computation) -> str:
    rot = "k_R'" if _mla(comp).turns else "k_R"
    c = "ĉ_KV" if _mla(comp).kv_norm else "c_KV"
    return f"latent cache [{c} | {rot}], every head"


def latent_cols(comp: Computation) -> tuple[str, ...]:
    mla = _mla(comp)
    return tuple(f"c{i}" for i in range(mla.d_c)) + tuple(f"r{i}" for i in range(mla.rotary_width[1]))


def projection(comp: Computation, role: str, token: str | None) -> str:
    """The step's q, or a K or V row, in latent attention's terms (expanded from the cached latent)."""
    mla = _mla(comp)
    c = "ĉ_KV" if mla.kv_norm else "c_KV"
    rot = "'" if mla.turns else ""
    at = "" if token is None else f"[{token}]"
    return {"Q": f"[q_C | q_R{rot}]{at}", "K": f"[{c}{at}·W_UK | k_R{rot}{at}]", "V": f"{c}{at}·W_UV"}[role]


def cache_line(comp: Computation) -> str:
    """The one line that counts what the cache holds, against multi-head attention's K and V."""
    mla = _mla(comp)
    mha = mla.cache_per_token()[1]
    # DeepSeek-V2's Table 1 counts multi-head attention's cache as 2·n_h·d_h with d_h the head width, d_nope
    # here; the scores are divided by √dₖ with dₖ = d_nope + d_rope, another number: say which is which
    return (f"the cache holds the latent, per token and per layer {mla.cache_sum}"
            f" numbers for every head; multi-head attention would hold K and V of every head, per token and per"
            f" layer 2·n_h·d_h = 2·{mla.num_heads}·{mla.d_nope} = {mha} (DeepSeek-V2's Table 1: d_h is a head's"
            f" width, d_nope = {mla.d_nope}, not the dₖ = d_nope + d_rope = {mla.d_qk} of the scale"
            " √dₖ); each head's K and V rows are expanded from the cached latent (the Absorb stage never expands them)")


def expanded_title(title: str) -> str:
    """``K cache  2×4`` -> ``K, expanded from the latent  2×4``: not what the cache keeps."""
    return title.replace(" cache", ", expanded from the latent", 1).replace(" rolling buffer", ", expanded from the latent", 1)
