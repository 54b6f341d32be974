"""[ssd] as one part of a head's pass (contracts §15): its ``attend`` hook puts Mamba-2's state-space duality in the
softmax's place, and its record (SsdRecord) keeps both forms of the head with every number the stages show.

The scenario's head h is the table's head h: the whole table runs once (kernels/ssd.py, every head and group
together, as the gated norm of a group reads several heads), and each head answers its own share. What the
head's result then holds, as the JSON and the heads view read it: ``scores`` is C·Bᵀ, ``weights`` the map
M = L ∘ C·Bᵀ that multiplies dt·x (0 above the diagonal, rows summing to nothing in particular), ``output`` the
head's y (gated and normalised where the table gives z): what Concat joins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, cast

import numpy as np

from qkv_tui.core.variants.ssd import TABLE, Ssd
from qkv_tui.kernels.attention import Attended, HeadPass, PartSpec
from qkv_tui.kernels.norm import normalise
from qkv_tui.kernels.policy import Policy
from qkv_tui.kernels.softmax import SoftmaxRows
from qkv_tui.kernels.ssd import SsdHead, silu, ssd, steps
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True, eq=False)
class SsdGate:
    """The head's share of the gated RMSNorm: y·SiLU(z), normalised over its group's columns (several heads')."""

    z: Matrix  # (n, d) the head's columns of z
    silu_z: Matrix  # (n, d) SiLU(z) as kept
    group_gated: Matrix  # (n, group width) y·SiLU(z) over the whole group, the row the mean square is taken of
    first: int  # the head's first column within its group
    spread: Matrix  # (n,) each row's mean square over the group
    root: Matrix  # (n,) √(ms + eps)
    gamma: Matrix  # (d,) the head's gains
    eps: float
    normed: Matrix  # (n, d) the head's output

    @property
    def gated(self) -> Matrix:
        d = self.z.shape[1]
        return self.group_gated[:, self.first:self.first + d]


@dataclass(frozen=True, eq=False)
class SsdRecord:
    """One head of [ssd]: both forms (kernels/ssd.py SsdHead), the step's sum before softplus where it was
    computed, the gate where given, and the head's group."""

    ssd: SsdHead
    head: int
    group: int
    summed: Matrix | None  # (n,) X·W_dt + dt_bias before softplus; None where dt is given
    dt_limit: tuple[float, float]
    gate: SsdGate | None
    own_stages: ClassVar[bool] = True  # its recurrence and its masked attention replace Score … Mix (teach/stages/ssd.py)
    projects: ClassVar[bool] = False  # C, B and x are the table's: the head's W_Q, W_K and W_V are not read
    distribution: ClassVar[bool] = False  # L ∘ C·Bᵀ has no row total to check (teach/summary.py asks)
    map_formula: ClassVar[tuple[tuple[str, bool], ...]] = (("L ∘ C·Bᵀ", True), ("·(dt·x)", False))  # the heads view
    # what makes each head's map its own, as the heads view says it: no W_Q is read (core/part_questions.py said)
    words: ClassVar[Mapping[str, str]] = MappingProxyType({
        "heads.own": "Each head has its own A and dt (its C and B are shared by the heads of a group), so a decay"
                     " and a pattern of its own"})
    refuses: ClassVar[Mapping[str, str]] = MappingProxyType({
        "tiles": "No tiles for [ssd]: the tiles view streams a softmax's running max and sum, and a state-space head"
                 " has no softmax; its Recurrence stage is the streaming form, one state per head.",
        "cache": "No KV-cache replay for [ssd]: a Mamba-2 head keeps one d × d_state state, not a cache of keys and"
                 " values; the Recurrence stage shows that state after every token.",
        "worksheet": "a worksheet of [ssd] is not written yet (its recurrence, decay mask and gated norm have no"
                     " printed tables); use --export markdown for every step",
    })

    @property
    def output(self) -> Matrix:
        return self.ssd.y if self.gate is None else self.gate.normed

    def overflow(self, stage: str, at: Any) -> tuple[str, str, str] | None:
        """Its numbers past float64, in the order the stages work them (core/part_questions.py): a state past
        float64 would show ∞ in Recurrence and a y the Agree stage could not match, though the attention form,
        read alone, stays finite."""
        if stage != "state":
            return None
        s = self.ssd
        inputs = "expected smaller x, dt (X, W_dt or dt_bias) or B"
        # softplus of a step past float64 is 0 or the step itself, but no line can show the step it came from
        summed = None if self.summed is None else self.summed.reshape(-1, 1)
        said: tuple[str, str, str] | None = at.named((
            ("[ssd]'s X·W_dt + dt_bias", summed, False, False, "expected smaller X, W_dt or dt_bias"),
            ("[ssd]'s dt·x", s.xdt, False, False, "expected smaller x or dt (X, W_dt or dt_bias)"),
            ("[ssd]'s state h", s.states.reshape(s.states.shape[0], -1), False, False, inputs),
            ("[ssd]'s recurrent y", s.y_recurrent, False, False, inputs + ", or a smaller C or D"),
            ("[ssd]'s C·Bᵀ", s.G, False, True, "expected smaller C or B"),
            ("[ssd]'s map L ∘ C·Bᵀ", s.M, False, True, "expected smaller C or B"),
            ("[ssd]'s y", s.y_attention, False, False, inputs + ", or a smaller C or D"),
        ))
        return said

    @property
    def route(self) -> str:
        """How a token's output is made, where the summary's "weights·V" would mislead."""
        said = "(L ∘ C·Bᵀ)·(dt·x) + D·x (the state-space duality's attention form)"
        return said if self.gate is None else said + " gated by SiLU(z) and RMS-normalised by group"


@dataclass(frozen=True, eq=False)
class SsdSpec(PartSpec):
    record: SsdRecord
    keeps_scale: ClassVar[bool] = False  # C·Bᵀ is divided by nothing

    def attend(self, p: HeadPass) -> Attended:
        s = self.record.ssd
        n = s.M.shape[0]
        logits = np.where(p.allow, s.M, -np.inf)  # (n, n) as a masked input is kept: −∞ where hidden
        soft = SoftmaxRows(np.zeros(n), s.M, np.ones(n), s.M, None)  # the map as it is: nothing exponentiated
        out = self.record.output
        for a in (logits, soft.row_max, soft.row_sum):
            a.setflags(write=False)
        return Attended(1.0, s.G, s.G, None, logits, soft, out)

    def after_mix(self, p: HeadPass, attended: Attended) -> None:
        p.records.append(self.record)


def records(s: Ssd, X: Matrix, policy: Policy) -> list[SsdRecord]:
    """Every head's record: the table run once on X (what the heads read), as core/variants/ssd.py run does, with
    the intermediates its stages show."""
    summed = None
    if s.dt is not None:
        dt = s.dt
    else:
        W_dt = cast(Matrix, s.W_dt)
        summed = policy.worked(policy.matmul(X, W_dt) + s.dt_bias[None, :])
        dt = steps(policy.matmul(X, W_dt), s.dt_bias, s.dt_limit, policy)
    heads = ssd(X if s.x is None else s.x, dt, s.A, s.B, s.C, s.D, s.num_groups, policy)
    per_group = s.num_heads // s.num_groups
    gates: list[SsdGate | None] = [None] * s.num_heads
    if s.z is not None and s.gamma is not None:
        silu_z = policy.worked(silu(s.z))
        gated = policy.table(policy.worked(heads.y * silu_z))
        size = gated.shape[1] // s.num_groups
        d = gated.shape[1] // s.num_heads
        for g in range(s.num_groups):
            cols = slice(g * size, (g + 1) * size)
            normed = normalise(policy, "rms", gated[:, cols], s.gamma[cols], None, s.eps)
            for h in range(g * per_group, (g + 1) * per_group):
                at = h * d - g * size
                mine = slice(h * d, (h + 1) * d)
                gates[h] = SsdGate(s.z[:, mine], silu_z[:, mine], gated[:, cols], at, normed.spread, normed.root,
                                   s.gamma[mine], s.eps, normed.X_norm[:, at:at + d])
    return [SsdRecord(head, h, h // per_group, None if summed is None else summed[:, h], s.dt_limit, gates[h])
            for h, head in enumerate(heads.heads)]


def ssd_part(run: Any) -> Callable[[int], SsdSpec] | None:
    """Each head's SsdSpec where the scenario has [ssd] (``run`` is core/head_parts.py's Run)."""
    s = TABLE.of(run.sc)
    if s is None:
        return None
    with run.quiet():
        made = records(s, run.X_in, run.policy)
    return lambda h: SsdSpec(made[h])
