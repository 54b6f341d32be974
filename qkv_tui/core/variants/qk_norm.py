"""``[qk_norm]``: RMSNorm of every query and key vector after the projection, before RoPE (docs/scenario-format.md).

Qwen3 and Gemma 3 normalise each head's vector on its own (``over = "head"``, one γ of d_k gains shared by
the heads); OLMo 2 normalises the whole projection of a token, every head's columns together, before it is
cut into heads (``over = "all"``, one gain per column of the wide W_Q and W_K).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.base.values import show as _show
from qkv_tui.core.arrays import Vector
from qkv_tui.core.toml_text import string, vector
from qkv_tui.core.variants.common import Context, Faces, Table, Trains, choice, number, numbers

QK_NORM_KEYS = ("over", "gamma_q", "gamma_k", "eps")
QK_NORM_OVER = ("head", "all")
DEFAULT_QK_EPS = 1e-6


@fixed
class QKNorm:
    """RMSNorm on Q and K: over each head's d_k, or over the whole projection width."""

    not_plain: ClassVar[str] = "[qk_norm]"  # what makes the attention other than plain (core/diagnose.py)
    # what it changes of a head's pass and how (core/variants/refusals.py): its statistics read a head's whole d_k
    acts_on: ClassVar[str] = "queries and keys"
    does: ClassVar[str] = "normalises"
    # what a view says of it at a place (teach/stages/shared_kv.py: a layer that reuses K does this to Q alone)
    words: ClassVar[Mapping[str, str]] = MappingProxyType({"reuse.q": "normed"})
    whole_head: ClassVar[bool] = True

    over: str  # "head" | "all"
    gamma_q: Vector  # (d_k,) with "head", shared by the heads; (num_heads·d_k,) with "all"
    gamma_k: Vector  # (d_k,) with "head"; (num_kv_heads·d_k,) with "all"
    eps: float  # added to the mean square under the root

    def gammas(self, head: int, kv_head: int, d_k: int) -> tuple[Vector, Vector]:
        """The gains one query head's Q and its K/V head's K are multiplied by, d_k each."""
        if self.over == "head":
            return self.gamma_q, self.gamma_k
        return self.gamma_q[head * d_k:(head + 1) * d_k], self.gamma_k[kv_head * d_k:(kv_head + 1) * d_k]

    @staticmethod
    def overflow_hint(name: str) -> str | None:
        """What to change where the scores overflow (core/part_questions.py): the normalised vectors' size is the gains'."""
        if name != "scores":
            return None
        return "expected smaller [qk_norm] gains (gamma_q, gamma_k), so that every product stays finite"


def parse_qk_norm(table: dict[str, Any], ctx: Context) -> QKNorm:
    v = ctx.v
    if "over" not in table:
        raise v.fail("[qk_norm] is missing 'over'; expected over = \"head\" (each head's d_k on its own: Qwen3, Gemma 3)"
                     " or \"all\" (the whole projection before it is cut into heads: OLMo 2)")
    over = choice(v, table["over"], "[qk_norm] over", QK_NORM_OVER)
    widths = sorted({d_k for _, d_k in ctx.heads})
    if len(widths) > 1:
        said = ", ".join(f"{name} has d_k = {d_k}" for name, d_k in ctx.heads[:4])
        raise v.fail(f"[qk_norm] needs every head to have the same d_k (one set of gains for every head), but {said};"
                     " expected one d_k for every head")
    d_k = widths[0]
    if over == "head":
        q_count, k_count = d_k, d_k
        q_what = k_what = f"one gain per column of a head, d_k = {d_k}"
    else:
        if ctx.num_heads_split is None:
            raise v.fail("[qk_norm] over = \"all\" needs the heads in [attention] form (it normalises the whole projection"
                         " before it is cut into heads); write [attention] or use over = \"head\"")
        kv = ctx.num_kv_heads if ctx.num_kv_heads is not None else ctx.num_heads_split
        q_count, k_count = ctx.num_heads_split * d_k, kv * d_k
        q_what = f"one gain per column of W_Q, num_heads × d_k = {ctx.num_heads_split} × {d_k}"
        k_what = f"one gain per column of W_K, num_kv_heads × d_k = {kv} × {d_k}"
    gamma_q = numbers(v, table["gamma_q"], "[qk_norm] gamma_q", q_count, q_what) if "gamma_q" in table else _ones(q_count)
    gamma_k = numbers(v, table["gamma_k"], "[qk_norm] gamma_k", k_count, k_what) if "gamma_k" in table else _ones(k_count)
    eps = DEFAULT_QK_EPS
    if "eps" in table:
        eps = number(v, table["eps"], "[qk_norm] eps")
        if eps <= 0:
            raise v.fail(f"[qk_norm] eps = {_show(table['eps'])}; expected a finite number > 0 (it keeps the root away from 0)")
    return QKNorm(over, gamma_q, gamma_k, eps)


def _ones(count: int) -> Vector:
    ones = np.ones(count)  # (count,)
    ones.setflags(write=False)
    return ones


def write_qk_norm(qk: QKNorm) -> list[str]:
    """Every key, defaults included, so the file says what the scenario computes with."""
    return ["[qk_norm]", f"over = {string(qk.over)}", f"gamma_q = {vector(qk.gamma_q)}", f"gamma_k = {vector(qk.gamma_k)}",
            f"eps = {float(qk.eps)!r}"]


def _summary(qk: QKNorm) -> str:
    return "qk-norm per head" if qk.over == "head" else "qk-norm over all heads"


def trains(ctx: Context) -> tuple[str, ...]:
    """Its gains in [backward]'s train list."""
    return ("gamma_q", "gamma_k") if ctx.earlier.get("qk_norm") is not None else ()


TABLE: Table[QKNorm] = Table("qk_norm", QK_NORM_KEYS, parse_qk_norm, _summary, write_qk_norm,
                             faces=Faces(head="qkv_tui.core.qk_norm_part:qk_norm_part",
                                         edit="qkv_tui.core.variants.qk_norm_edit",
                                         # after Project (and [mla]'s latent path), before Rotate; backwards before dProject
                                         stages=(("project", "qk_norm", "SPEC"), ("drotate", "qk_norm", "BACKWARD"))),
                             trains=Trains(("gamma_q", "gamma_k"), "b_O", trains))
