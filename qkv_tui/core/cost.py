"""What attention costs, counted (docs/cost.md): operations and bytes per stage, the KV cache, FlashAttention's
memory traffic, MLA's two forms at decode and a roofline.

Every figure is a :class:`Figure`, a sum of products of named whole numbers, so whatever prints it prints
its formula with its numbers (``2·3·4·2·2 = 96``) and the figure recomputes from what is printed. The
counting rules (contracts, "What attention costs"):

- ``matmul_flops``: a product of m×n by n×p counts 2mnp, as a dense kernel computes it, masked cells
  included. K and V are projected once per K/V head, and a K/V head is read once however many query heads
  share it (a grouped kernel loads it once for the group).
- ``other_ops``: the operations that are not a multiply-add of a product: exponentials, divisions, roots and
  tanh, each named. Elementwise additions and multiplications (a bias, RoPE's turn, the gate's ⊙) are not
  counted: they cost what reading their operands costs, and the bytes say that.
- ``bytes_read`` / ``bytes_written``: each distinct input of a stage read once, each output written once,
  at the dtype's bytes per number.

Each stage module counts its own stage (its ``cost`` face, teach/stages/common.py) with these pieces; a new
variant brings its own count. This module holds only the arithmetic: no trace, no screen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from qkv_tui.core import part_questions as ask
from qkv_tui.core.cost_options import DEFAULT_CONTEXT as DEFAULT_CONTEXT
from qkv_tui.core.cost_options import DEFAULT_DTYPE as DEFAULT_DTYPE
from qkv_tui.core.cost_options import DTYPES as DTYPES
from qkv_tui.core.cost_options import MAX_CONTEXT as MAX_CONTEXT
from qkv_tui.core.layer_schedule import NO_ATTENTION, STATE, attends, keeps_state, kv_source
from qkv_tui.core.scenario import Scenario

PREFILL, DECODE = "prefill", "decode"


# --- figures: a sum of products of named numbers -------------------------------------------------------


@dataclass(frozen=True)
class Term:
    """One product: ``what`` it counts and its factors, each a (name, value) pair (``("n", 3)``)."""

    what: str
    factors: tuple[tuple[str, int], ...]

    @property
    def value(self) -> int:
        return math.prod(v for _, v in self.factors)

    def numbers(self) -> str:
        return "·".join(str(v) for _, v in self.factors) if self.factors else "0"

    def names(self) -> str:
        return "·".join(name for name, _ in self.factors)


def term(what: str, *factors: tuple[str, int]) -> Term:
    return Term(what, tuple(factors))


@dataclass(frozen=True)
class Figure:
    """A sum of products; ``text()`` is its formula with its numbers and the result."""

    terms: tuple[Term, ...] = ()

    @property
    def value(self) -> int:
        return sum(t.value for t in self.terms)

    def __add__(self, other: Figure) -> Figure:
        return Figure(self.terms + other.terms)

    def text(self, labelled: bool = True) -> str:
        """``Q 2·3·4·2 + K 2·3·4·2 = 96``; a lone term without its label: ``2·3·4·2 = 48``; none: ``0``."""
        live = [t for t in self.terms if t.value]
        if not live:
            return "0"
        if len(live) == 1 and live[0].factors and len(live[0].factors) == 1:
            return f"{live[0].what} {live[0].value}" if labelled else str(live[0].value)
        parts = [f"{t.what} {t.numbers()}" if labelled else t.numbers() for t in live]
        return f"{' + '.join(parts)} = {self.value}"


def fig(*terms: Term) -> Figure:
    return Figure(tuple(terms))


# --- one stage's count ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """What one phase computes: ``rows`` query rows (prefill: the scenario's n; decode: 1), each against ``keys``
    keys (prefill: m; decode: the context, capped at a sliding window), of which ``new`` are projected now
    (prefill: m; decode: 1, or 0 for cross-attention, whose context is projected once), at ``bytes`` a number."""

    name: str
    rows: int
    keys: int
    new: int
    bytes: int
    dtype: str
    # fewer keys than ``keys`` that each query row's heads attend, where a part selects them (the indexer's top_k):
    # its name and count; None: every key
    attended: tuple[str, int] | None = None

    @property
    def R(self) -> tuple[str, int]:
        """The query rows as a factor: n at prefill, 1 at decode."""
        return ("n" if self.name == PREFILL else "1", self.rows)

    @property
    def K(self) -> tuple[str, int]:
        """The keys each row attends: m at prefill, N (the context, capped at a window) at decode."""
        return ("m" if self.name == PREFILL else "N", self.keys)

    @property
    def A(self) -> tuple[str, int]:
        """The keys each row's heads attend: :attr:`K`, or the part's fewer (top_k) where a part selects them."""
        return self.K if self.attended is None else self.attended

    @property
    def SEEN(self) -> tuple[str, int]:
        """The keys whose K and V the heads read, each once: at decode the one row's attended keys; at prefill
        every key (the rows' selections together may reach each one)."""
        return self.A if self.name == DECODE else self.K

    @property
    def NEW(self) -> tuple[str, int]:
        """The key rows projected now: m at prefill, the new token's 1 at decode."""
        return ("m" if self.name == PREFILL else "new", self.new)


def phases(sc: Scenario, dtype: str, context: int) -> tuple[Phase, Phase]:
    b = DTYPES[dtype]
    keys = sc.m if sc.is_cross else context
    if sc.window is not None and not sc.is_cross:
        keys = min(keys, sc.window)  # the cache keeps the window's keys only
    return (Phase(PREFILL, sc.n, sc.m, sc.m, b, dtype, attended(sc, sc.m)),
            Phase(DECODE, 1, keys, 0 if sc.is_cross else 1, b, dtype, attended(sc, keys)))


def attended(sc: Scenario, keys: int) -> tuple[str, int] | None:
    """What a part narrows ``keys`` to for each query row's heads (a table's ``attended_keys``: the indexer's
    top_k, where fewer); None where the heads attend every key."""
    for table in ask.tables(sc):
        narrows = getattr(table, "attended_keys", None)
        said = narrows(keys) if callable(narrows) else None
        if said is not None:
            return said  # type: ignore[no-any-return]
    return None


@dataclass(frozen=True)
class Count:
    """One stage's cost in one phase. Operations in ``other`` are named by kind (exp, div, root, tanh)."""

    stage: str  # the stage's key
    name: str  # its name on screen
    phase: str
    matmul: Figure = field(default_factory=Figure)
    other: Figure = field(default_factory=Figure)
    read: Figure = field(default_factory=Figure)
    written: Figure = field(default_factory=Figure)

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved (the products and the other operations over every byte read and written)."""
        moved = self.read.value + self.written.value
        return (self.matmul.value + self.other.value) / moved if moved else 0.0

    def as_json(self) -> dict[str, object]:
        return {"stage": self.stage, "phase": self.phase, "matmul_flops": self.matmul.value,
                "other_ops": self.other.value, "bytes_read": self.read.value, "bytes_written": self.written.value}


@dataclass(frozen=True)
class Uncounted:
    """A stage the cost view lists without figures, and why (never a silent 0)."""

    stage: str
    name: str
    reason: str


# --- the shapes stages count with ---------------------------------------------------------------------


@dataclass(frozen=True)
class Shapes:
    """A scenario's sizes: per query head (d_k, d_v), per K/V head (d_k, d_v), d_model, the K/V input's width."""

    d_model: int
    d_in: int
    heads: tuple[tuple[int, int], ...]
    kv: tuple[tuple[int, int], ...]

    @property
    def h(self) -> int:
        return len(self.heads)

    @property
    def sum_dk(self) -> int:
        return sum(dk for dk, _ in self.heads)

    @property
    def sum_dv(self) -> int:
        return sum(dv for _, dv in self.heads)

    @property
    def kv_dk(self) -> int:
        return sum(dk for dk, _ in self.kv)

    @property
    def kv_dv(self) -> int:
        return sum(dv for _, dv in self.kv)


def shapes(sc: Scenario) -> Shapes:
    heads = tuple((h.d_k, h.d_v) for h in sc.heads)
    owners: dict[int, tuple[int, int]] = {}
    for i, hd in enumerate(sc.heads):
        owners.setdefault(sc.kv_head(i), (hd.W_K.shape[1], hd.W_V.shape[1]))
    kv = tuple((int(a), int(b)) for a, b in owners.values())
    return Shapes(int(sc.X.shape[1]), int(sc.X_kv.shape[1]), heads, kv)


def uniform(widths: tuple[int, ...]) -> int | None:
    return widths[0] if widths and all(w == widths[0] for w in widths) else None


def per_heads(what: str, count: int, letter: str, widths: tuple[int, ...], width_name: str,
              *front: tuple[str, int], back: tuple[tuple[str, int], ...] = ()) -> Figure:
    """``front · width · count`` when every head has the same width, else one term per head."""
    same = uniform(widths)
    if same is not None:
        return fig(term(what, *front, (width_name, same), *back, (letter, count)))
    return fig(*(term(f"{what}{i + 1}", *front, (width_name, w), *back) for i, w in enumerate(widths)))


def B(ph: Phase) -> tuple[str, int]:
    return ("B", ph.bytes)


# --- the KV cache ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerCache:
    """One layer's cache per token (``per_token``, bytes), its window (None: every token kept) and the fixed
    state of a linear or delta-rule layer (None where it has none)."""

    layer: int
    kind: str  # full | sliding W | shared | a table's own (its ``cache_kind``) | the schedule's state layer
    per_token: Figure
    window: int | None = None
    state: Figure | None = None
    keeps_state: bool = False  # a fixed state in place of a cache (``state`` None where its sizes are not here)

    def at(self, context: int) -> int:
        return min(context, self.window if self.window is not None else context) * self.per_token.value


@dataclass(frozen=True)
class KvCache:
    layers: tuple[LayerCache, ...]
    context: int
    held: str  # what the per-layer figure comes from, in words
    # softmax layers of a model whose scenario shows a linear or delta-rule layer: their K/V heads are not in it, so
    # they are left out of ``layers`` (and of every sum) and named, never counted as 0
    unknown: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()  # what a table says of what it adds to the cache (a width, and why)

    @property
    def per_token(self) -> int:
        return sum(layer.per_token.value for layer in self.layers)

    @property
    def at_context(self) -> int:
        return sum(layer.at(self.context) for layer in self.layers)

    @property
    def state(self) -> int:
        return sum(layer.state.value for layer in self.layers if layer.state is not None)

    def as_json(self) -> dict[str, object]:
        return {"bytes_per_token": self.per_token,
                "layers": [{"layer": layer.layer, "kind": layer.kind, "bytes_per_token": layer.per_token.value}
                           for layer in self.layers],
                "bytes_at_context": self.at_context}


def attention_kind(sc: Scenario) -> str:
    """What the scenario's layer caches as the cache view names it: a table's own kind (its ``cache_kind``: a
    latent, or a state in place of the softmax), else full or sliding W."""
    own = ask.scenario_says(sc, "cache_kind")
    if own is not None:
        return own
    return "full" if sc.window is None else f"sliding {sc.window}"


def _state_kind(sc: Scenario, kind: str) -> bool:
    """Whether a layer of ``kind`` keeps a fixed state: the schedule's state layer, or the scenario's own with a
    table that puts a state in place of the softmax."""
    return kind == STATE or (ask.scenario_has(sc, "state") and kind == attention_kind(sc))


def layer_cache(sc: Scenario, layer: int, kind: str, bytes_per: int) -> LayerCache:
    """One layer of the scenario's kind (or of a schedule entry's: full, sliding W, linear)."""
    b = ("B", bytes_per)
    s = shapes(sc)
    held = _held(sc)
    also = _also(sc, b)
    if held is not None and kind == attention_kind(sc):  # a table's own cache per token (a latent)
        what, size = held
        return LayerCache(layer, kind, fig(term(what, size, b)) + also)
    if _state_kind(sc, kind):
        # a state of d_k × d_v per head, whatever the length: no token is cached
        if ask.scenario_has(sc, "state"):
            # a table may size its own state (a Mamba-2 head's d × d_state); else each head's d_k × d_v
            sizes = ask.scenario_answer(sc, "state_sizes")
            widths = tuple(dk * dv for dk, dv in s.heads) if sizes is None else tuple(sizes)
            width = ask.scenario_answer(sc, "state_width") or "d_k·d_v"
            state = per_heads("state", s.h, "h", widths, str(width), back=(b,))
        else:
            state = None  # a linear layer of a model whose scenario shows a softmax layer: its sizes are not here
        return LayerCache(layer, kind, fig(term("no cache", ("0", 0))), None, state, keeps_state=True)
    if kind == "shared":
        return LayerCache(layer, kind, fig(term("reads another layer's cache", ("0", 0))))
    window = int(kind.split(" ")[1]) if kind.startswith("sliding") else None
    sums = tuple(dk + dv for dk, dv in s.kv)
    per = per_heads("K+V", len(s.kv), "h_kv", sums, "d_k + d_v", back=(b,))
    return LayerCache(layer, kind, per + also, window)


def _also(sc: Scenario, b: tuple[str, int]) -> Figure:
    """What a table caches per token beside K and V or the latent (its ``cache_also``: the indexer's key)."""
    found = [getattr(table, "cache_also", None) for table in ask.tables(sc)]
    return fig(*(term(what, size, b) for what, size in (f for f in found if isinstance(f, tuple))))


def kv_cache(sc: Scenario, bytes_per: int, context: int) -> KvCache:
    """The scenario's one layer, or every layer of its model's schedule: a full or sliding layer of the schedule
    holds the K/V heads this scenario's layer holds, a linear layer no cache, a layer that reuses an earlier
    layer's K and V (" kv-from L") none of its own, an "mlp" layer (no attention) nothing."""
    own = attention_kind(sc)
    state = ask.scenario_has(sc, "state")
    schedule = sc.input.schedule
    notes = tuple(note(bytes_per) for table in ask.tables(sc) if callable(note := getattr(table, "cache_note", None)))
    if not schedule:
        return KvCache((layer_cache(sc, sc.input.chosen_layer, own, bytes_per),), context, "this scenario's layer",
                       notes=notes)
    layers, unknown = [], []
    for i, entry in enumerate(schedule):
        words = entry.split(" ")
        if not attends(entry):  # an MLP block of a hybrid (Nemotron-H): nothing cached, no state
            layers.append(LayerCache(i, NO_ATTENTION, fig(term("no attention", ("0", 0)))))
            continue
        if kv_source(entry) is not None:  # it reads its source layer's cache, the chosen layer too
            layers.append(layer_cache(sc, i, "shared", bytes_per))
            continue
        if keeps_state(entry):
            kind = own if i == sc.input.chosen_layer and state else STATE
        elif state:
            unknown.append(i)  # a softmax layer's K/V heads are not among a linear layer's
            continue
        else:
            kind = own if _held(sc) is not None else " ".join(words[:2])
        layers.append(layer_cache(sc, i, kind, bytes_per))
    return KvCache(tuple(layers), context, "every layer of the model's schedule, each with the K/V heads of the"
                   " layer shown", tuple(unknown), notes)


def _held(sc: Scenario) -> tuple[str, tuple[str, int]] | None:
    """What a table caches per token in every layer in place of K and V (a latent: its name, and its size as
    written and its value); None where the K/V heads are cached."""
    for table in ask.tables(sc):
        held = getattr(table, "cache_held", None)
        if held is not None:
            return held  # type: ignore[no-any-return]
    return None


def mib(n: int) -> str:
    return f"{n / 2**20:,.2f} MiB".replace(",", " ")


# --- FlashAttention against standard attention (Dao et al. 2022, Theorem 2) ---------------------------


@dataclass(frozen=True)
class Traffic:
    """HBM traffic in numbers (not bytes) of one head over N tokens at head dimension d, SRAM M numbers."""

    standard: Figure
    flash: Figure
    block: int  # B_c = ⌈M / 4d⌉ keys per tile
    passes: int  # T_c = ⌈N / B_c⌉


def traffic(N: int, d: int, sram_numbers: int) -> Traffic:
    """Standard attention (the paper's Algorithm 0) reads Q and K, writes S, reads S, writes P, reads P and V and
    writes O: 4Nd + 4N². FlashAttention (Algorithm 1) reads K and V once and, for each of the T_c tiles of keys,
    reads Q, reads and writes O, and reads and writes ℓ and m: 2Nd + T_c·(3Nd + 4N), with B_c = ⌈M/4d⌉ so that
    Q, K, V and O tiles fit in SRAM. T_c ≈ 4Nd/M makes it Θ(N²d²/M), Theorem 2's bound."""
    block = max(1, -(-sram_numbers // (4 * d)))
    passes = -(-N // block)
    standard = fig(term("QKV O", ("4", 4), ("N", N), ("d", d)), term("S P", ("4", 4), ("N", N), ("N", N)))
    flash = fig(term("K V", ("2", 2), ("N", N), ("d", d)),
                term("Q O", ("T_c", passes), ("3", 3), ("N", N), ("d", d)),
                term("ℓ m", ("T_c", passes), ("4", 4), ("N", N)))
    return Traffic(standard, flash, block, passes)


# --- the roofline --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accelerator:
    """Published dense 16-bit tensor peak (FLOP/s) and memory bandwidth (byte/s); docs/cost.md names the sources."""

    name: str
    peak: float
    bandwidth: float

    @property
    def ridge(self) -> float:
        """The arithmetic intensity (FLOP/byte) where the roof turns: below it a stage waits on memory."""
        return self.peak / self.bandwidth

    def attainable(self, intensity: float) -> float:
        return min(self.peak, self.bandwidth * intensity)


ACCELERATORS: tuple[Accelerator, ...] = (
    Accelerator("H100 SXM", 989.4e12, 3.35e12),
    Accelerator("A100 SXM 80GB", 312e12, 2.039e12),
    Accelerator("MI300X", 1307.4e12, 5.3e12),
    Accelerator("RTX 4090", 165.2e12, 1.008e12),
)


def bound(count: Count, acc: Accelerator) -> str:
    return "memory-bound" if count.intensity < acc.ridge else "compute-bound"
