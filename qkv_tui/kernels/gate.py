"""The output gate (Qiu et al. 2025; Qwen3-Next): a head's output times sigmoid(X̂·W_G), cell by cell.

It is a non-linearity between W_V and W_O (which would otherwise multiply into one low-rank linear map), and a
gate near 0 lets a head say nothing for a token, so the head need not park its weight on a sink (or the first
token) to stay quiet; Qiu et al. found such a gate mitigates attention sinks and massive activations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from qkv_tui.kernels.attention import Attended, HeadPass, PartSpec
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.sigmoid import sigmoid as sigmoid  # re-exported: the importers' routers read it here
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True, eq=False)
class Gated:
    """The gate's numbers for one head; every array read-only."""

    logit: Matrix  # (n, d_v) X̂·W_G, what the sigmoid reads
    gate: Matrix  # (n, d_v) σ(logit) = 1 / (1 + e^−logit), each in (0, 1)
    gated: Matrix  # (n, d_v) output ⊙ gate: what Concat joins
    W_G: Matrix  # (d_model, d_v) the gate's weights

    joined_name: ClassVar[str] = "gated"  # what the trace calls it
    joined_label: ClassVar[str] = "gated"  # what Concat's line calls it beside the head's name
    # what the tiles and cache views say of it (core/part_questions.said): it acts after the map, row by row
    words: ClassVar[Mapping[str, str]] = MappingProxyType({
        "tiles.after": "the output gate applies after the tiles' final O, as the Gate stage does: gated = O ⊙"
                       " σ({x}·W_G), row by row; it reads no score, so tiling changes nothing of it",
        "cache.after": "g[{token}] = σ({x}[{token}]·W_G) = {factor}; the gate reads the new token's own {x} row,"
                       " so nothing of it is cached",
        "cache.joined": "gated[{token}] = out ⊙ g = {out}·{factor} = {joined}; cell by cell, what Concat joins",
    })

    @property
    def joined(self) -> Matrix:
        """What Concat joins in the head's output's place."""
        return self.gated

    @property
    def factor(self) -> Matrix:
        """(n, d_v) what each cell of the head's output is multiplied by to give ``joined``."""
        return self.gate

    def overflow(self, stage: str, at: Any) -> tuple[str, str, str] | None:
        """The gate's logit X̂·W_G past float64 (core/part_questions.py): its sigmoid and the gated output stay
        finite wherever the logit is."""
        where = at.first(self.logit) if stage == "after" else None
        if where is None:
            return None
        return "gate", f"{at.head}: values in the gate's X̂·W_G overflow float64 at {where}", "expected smaller X or W_G"

    def x_path(self, head_grads: Any) -> tuple[str, str, Matrix, Matrix] | None:
        """Its path into the X the projections read, for dEmbed (teach/stages/embed.py): (role, what the line
        calls its gradient, the gradient at X̂·W_G, W_G); None where the head's gradients have no gate."""
        from qkv_tui.kernels.gate_backward import GateBack  # with the head's gradients

        back = head_grads.part(GateBack)
        return None if back is None else ("G", "gate", back.d_logit, self.W_G)

    def again(self, X: Matrix, output: Matrix) -> Gated:
        """This part for some query rows alone, from what their Query projection reads and their output (the
        cache view's new tokens): the gate is per token, so nothing of it is cached."""
        return gate(X, self.W_G, output)


def gate(X: Matrix, W_G: Matrix, output: Matrix, policy: Policy = EXACT) -> Gated:
    """σ(X W_G) for every query row (X: (n, d_model), what the Query projection reads), and output ⊙ it."""
    logit = policy.worked(policy.matmul(X, W_G))  # (n, d_v)
    g = sigmoid(logit, policy)  # (n, d_v)
    gated = policy.table(output * g)  # (n, d_v)
    for a in (logit, g, gated):
        a.setflags(write=False)
    return Gated(logit, g, gated, W_G)


@dataclass(frozen=True, eq=False)
class GateSpec(PartSpec):
    """The gate as a part of a head's forward pass: it reads X̂ (what the Query projection reads) and scales the
    head's output, after Mix."""

    W_G: Matrix  # (d_model, d_v)

    def after_mix(self, p: HeadPass, attended: Attended) -> None:
        p.records.append(gate(p.X, self.W_G, attended.output, p.policy))
