"""The cost view's figures for one computation: each stage's count in prefill and at decode (each stage's own
``cost`` face, teach/stages), the KV cache, FlashAttention's traffic and MLA's two forms (core/cost.py), and
the JSON ``--export cost`` writes (contracts, "What attention costs")."""

from __future__ import annotations

from dataclasses import dataclass

from qkv_tui.core import part_questions as ask
from qkv_tui.core.cost import (
    DEFAULT_CONTEXT,
    DEFAULT_DTYPE,
    DTYPES,
    PREFILL,
    Count,
    KvCache,
    Phase,
    Traffic,
    Uncounted,
    attended,
    kv_cache,
    phases,
    traffic,
)
from qkv_tui.core.engine import Computation
from qkv_tui.teach.trace import Trace


@dataclass
class Chosen:
    """The dtype and decode context the app's cost view counts at: the command line's --dtype and --context."""

    dtype: str = DEFAULT_DTYPE
    context: int = DEFAULT_CONTEXT


CHOSEN = Chosen()


def choose(dtype: str, context: int) -> None:
    CHOSEN.dtype, CHOSEN.context = dtype, context


SRAM_BYTES = 192 * 1024  # of an H100 SM's up to 228 KiB of shared memory, what a kernel's tiles may take (docs/cost.md)


@dataclass(frozen=True)
class CostReport:
    dtype: str
    context: int
    prefill: Phase
    decode: Phase
    counts: tuple[Count, ...]  # prefill's stages, then decode's
    uncounted: tuple[Uncounted, ...]
    kv: KvCache
    flash: Traffic | None  # a softmax scenario's
    flash_d: int
    forms: object | None  # a table's own decode figures (a latent's two forms: core/mla_cost.py), for its page
    long: tuple[Count, ...] = ()  # a prefill of the context's N tokens with the same shapes: the roofline's right side

    @property
    def bytes_per_number(self) -> int:
        return DTYPES[self.dtype]

    def phase(self, name: str) -> list[Count]:
        return [c for c in self.counts if c.phase == name]

    def as_json(self) -> dict[str, object]:
        return {"dtype": self.dtype, "bytes_per_number": self.bytes_per_number, "tokens": self.prefill.rows,
                "context": self.context, "stages": [c.as_json() for c in self.counts], "kv_cache": self.kv.as_json()}


def report(comp: Computation, dtype: str, context: int, trace: Trace | None = None) -> CostReport:
    sc = comp.scenario
    trace = trace or Trace(comp)
    prefill, decode = phases(sc, dtype, context)
    counts: list[Count] = []
    uncounted: list[Uncounted] = []
    for ph in (prefill, decode):
        for spec in trace.specs:
            if spec.cost is not None:
                counts.append(spec.cost(sc, ph))
            elif ph is prefill:
                uncounted.append(Uncounted(spec.stage.key, spec.stage.name, spec.uncounted))
    flash = None
    d = max(h.d_k for h in sc.heads)
    if not ask.scenario_has(sc, "state"):  # a state in place of the softmax has no softmax to fuse
        flash = traffic(context, d, SRAM_BYTES // DTYPES[dtype])
    forms = next((table.decode_forms(decode.A[1]) for table in ask.tables(sc) if hasattr(table, "decode_forms")), None)
    long_keys = sc.m if sc.is_cross else context
    long = Phase(PREFILL, context, long_keys, long_keys, DTYPES[dtype], dtype, attended(sc, long_keys))
    longs = tuple(spec.cost(sc, long) for spec in trace.specs if spec.cost is not None)
    return CostReport(dtype, context, prefill, decode, tuple(counts), tuple(uncounted),
                      kv_cache(sc, DTYPES[dtype], context), flash, d, forms, longs)
