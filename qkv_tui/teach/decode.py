"""Prefill, chunked prefill and decode with a (paged) KV cache, checked against full attention.

A serving engine first runs the prompt's P tokens at once (prefill: a P×P causal block),
or in chunks of C tokens (chunked prefill), and then decodes one token at a time. At every
step the new tokens' Queries are computed fresh, their Key and Value rows are written to
the cache, and the Queries attend to every cached row they may see. The queries of a
step are the last L of the S keys, so the causal mask is aligned to the bottom-right of
the L×S block: query row r is token S − L + r.

A cache only holds tokens already processed, so decoding is causal: the scenario's mask
is honoured where it allows past keys (causal, padding, a sliding window, the past part
of a custom mask), and a mask that lets tokens see later ones cannot be. Each step's
output must equal the matching rows of full attention under that decode mask. For
cross-attention the context's Keys and Values are computed once, at the first step; the
scenario's mask applies unchanged.

The cache is paged (teach/paged.py): every row is written through the block table, read
back through it, and the paged output is checked against the contiguous one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar, overload

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation, HeadResult
from qkv_tui.core.production import agreement, rounding_bound
from qkv_tui.core.scenario import BoolMatrix, Matrix, Scenario
from qkv_tui.kernels.attention import attend
from qkv_tui.teach.paged import Address, BlockTable, PagedStore, empty_table, pool_order, pool_size

T = TypeVar("T")
SCHEDULES = ("prefill", "chunked", "tokens")
SCHEDULE_NAMES = {"prefill": "prefill, then decode", "chunked": "chunked prefill, then decode",
                  "tokens": "decode token by token"}


def schedule(n: int, mode: str, prefill: int, chunk: int) -> list[range]:
    """The query tokens of each step: a prefill (whole or in chunks), then one token a step."""
    prefill = min(max(prefill, 1), n)
    if mode == "tokens":
        first = [range(0, 1)]
        prefill = 1
    elif mode == "chunked":
        first = [range(s, min(s + chunk, prefill)) for s in range(0, prefill, max(chunk, 1))]
    else:
        first = [range(0, prefill)]
    return first + [range(t, t + 1) for t in range(prefill, n)]


def decode_mask(sc: Scenario) -> tuple[BoolMatrix, bool]:
    """(the mask decoding uses, whether it is the scenario's own).

    Self-attention: the scenario's mask where it allows past keys, and never a later key;
    should that leave a query no key at all (a custom mask that looks only ahead), plain causal.
    """
    if sc.is_cross:
        return sc.allow, True
    causal = np.tril(np.ones((sc.n, sc.n), dtype=bool))
    allow = sc.allow & causal
    if not allow.any(axis=1).all():
        allow = causal
    return allow, bool(np.array_equal(allow, sc.allow))


@dataclass(frozen=True, eq=False)
class DecodeStep:
    """One head at one step: the queries of tokens ``start .. stop−1`` attend to the cache."""

    index: int  # 0-based step number
    head: int
    start: int  # first query token of the step
    stop: int  # one past the last query token
    kind: str  # "prefill" | "chunk" | "decode"
    q: Matrix  # (L, d_k) fresh Queries
    K_cache: Matrix  # (S, d_k) every cached Key the step reads (S = stop; cross: m)
    V_cache: Matrix  # (S, d_v)
    allowed: BoolMatrix  # (L, S) the step's mask, aligned bottom-right for self-attention
    scores: Matrix  # (L, S) q·K_cacheᵀ
    scaled: Matrix  # (L, S)
    weights: Matrix  # (L, S)
    output: Matrix  # (L, d_v)
    reference: Matrix  # (L, d_v) the same rows of full attention under the decode mask
    trace_output: Matrix  # (L, d_v) the same rows of the trace (the scenario's own mask)
    paged_output: Matrix  # (L, d_v) computed from rows gathered through the block table
    kv_computed: int  # Key/Value rows computed at this step
    kv_reused: int  # cached rows read again instead of recomputed
    bound: Matrix  # (L, d_v) how far two float64 evaluations may differ by rounding alone
    first: int = 0  # the oldest token still cached: a sliding window's rolling buffer drops those before it
    evicted: range = range(0)  # tokens whose rows left the rolling buffer at this step
    stepped: Matrix | None = None  # (L, S) the scaled scores after a part's step (the soft-cap's); None without
    # the records of the parts that act on each row after the map (the output gate), for the step's own tokens:
    # each computes its own from the new tokens' x̂, nothing of it is cached
    after: tuple[Any, ...] = ()

    @property
    def t(self) -> int:
        """The last token of the step."""
        return self.stop - 1

    @property
    def width(self) -> int:
        return self.stop - self.start

    @property
    def max_error(self) -> float:
        return float(np.abs(self.output - self.reference).max())

    @property
    def check(self) -> tuple[bool, str]:
        """(equal to full attention within float64 rounding, what to print): the text names the bound, never
        the difference itself, which depends on the order in which a CPU sums."""
        return agreement(self.output, self.reference, self.bound)

    @property
    def matches(self) -> bool:
        return self.check[0]

    @property
    def paged_error(self) -> float:
        return float(np.abs(self.paged_output - self.output).max())

    @property
    def paged_check(self) -> tuple[bool, str]:
        """The paged output against the contiguous one: the same rows, so the same numbers."""
        return agreement(self.paged_output, self.output, self.bound)


@dataclass(frozen=True)
class Paging:
    """The shared block table at one step: every head's cache uses the same table."""

    table: BlockTable  # after the step
    allocated: tuple[int, ...]  # physical blocks handed out at this step
    writes: tuple[Address, ...]  # where the step's Key/Value rows went
    pool: int  # physical blocks in the pool
    freed: tuple[int, ...] = ()  # blocks returned to the pool: every token in them left the sliding window


class Lazy(Sequence[T]):
    """``count`` items made by ``make(i)`` when first asked for; the last ``keep`` are kept.

    A 2,048-token scenario has 1,025 steps a head, each with an L×S weight matrix: built all at
    once they took tens of seconds and hundreds of MiB before the first one could be shown.
    """

    def __init__(self, count: int, make: Callable[[int], T], keep: int = 8) -> None:
        self._count, self._make, self._keep = count, make, keep
        self._kept: OrderedDict[int, T] = OrderedDict()

    def __len__(self) -> int:
        return self._count

    def kept(self, i: int) -> T | None:
        """Item ``i`` if it is already made, without making it."""
        return self._kept.get(i)

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> list[T]: ...

    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._count))]
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(i)
        if i in self._kept:
            self._kept.move_to_end(i)
            return self._kept[i]
        item = self._make(i)
        self._kept[i] = item
        if len(self._kept) > self._keep:
            self._kept.popitem(last=False)
        return item


@dataclass(frozen=True, eq=False)
class Decode:
    """Every step of every head, for one schedule; a step is computed when it is first looked at."""

    comp: Computation
    mode: str  # one of SCHEDULES
    ranges: tuple[range, ...]  # the query tokens of each step
    allow: BoolMatrix  # (n, m) the mask decoding uses
    own_mask: bool  # True when that is the scenario's mask
    reference: Sequence[Matrix]  # per head (n, d_v): full attention under the decode mask
    steps: tuple[Sequence[DecodeStep], ...]  # [head][step]
    paging: tuple[Paging, ...]  # [step]
    firsts: tuple[int, ...] = ()  # [step] the oldest token still cached (a sliding window drops the rest)
    prefilled: int = 0  # tokens before the first decode step
    _outputs: dict[int, list[Matrix]] = field(default_factory=dict, repr=False)  # [head] outputs of steps 0 …
    _buffers: dict[int, tuple[Matrix, Matrix]] = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return self.comp.scenario.n

    @property
    def count(self) -> int:
        return len(self.ranges)

    @property
    def block_size(self) -> int:
        return self.paging[0].table.block_size

    def kind(self, step: int) -> str:
        """"prefill", "chunk" or "decode": what the step does, known without computing it."""
        if self.ranges[step].start >= self.prefilled:
            return "decode"
        return "chunk" if self.mode == "chunked" else "prefill"

    def counts(self, step: int) -> tuple[int, int]:
        """(Key/Value rows computed, cached rows reused) at one step: the same for every head."""
        sc = self.comp.scenario
        if sc.is_cross:
            return (sc.m, 0) if step == 0 else (0, sc.m)
        rng = self.ranges[step]
        return len(rng), rng.start - self.firsts[step]

    def rows_computed(self, head: int, step: int) -> int:
        """Key/Value rows computed up to and including ``step``."""
        return sum(self.counts(i)[0] for i in range(step + 1))

    def rows_reused(self, head: int, step: int) -> int:
        return sum(self.counts(i)[1] for i in range(step + 1))

    def rows_without_cache(self, step: int) -> int:
        """Key/Value rows a model without a cache computes up to ``step``: all its keys again at every step."""
        m = self.comp.scenario.m
        if self.comp.scenario.is_cross:
            return m * (step + 1)
        return sum(r.stop for r in self.ranges[: step + 1])

    def cache(self, head: int) -> tuple[Matrix, Matrix]:
        """The head's contiguous K and V cache once every row is written; a step reads only rows before its end."""
        if head not in self._buffers:
            hr = self.comp.heads[head]
            self._buffers[head] = (np.ascontiguousarray(hr.K_used, dtype=float), np.ascontiguousarray(hr.V, dtype=float))
        return self._buffers[head]

    def outputs(self, head: int, step: int) -> Matrix:
        """The outputs of steps 0 … ``step`` stacked: each the step's own (contiguous-cache) output.

        Earlier steps' outputs are computed without their paged copy or kept score matrices,
        and remembered, so stepping forward costs one step's attention.
        """
        done = self._outputs.setdefault(head, [])
        steps = self.steps[head]
        for i in range(len(done), step + 1):
            shown = steps.kept(i) if isinstance(steps, Lazy) else None  # a step on screen has its output
            done.append(shown.output if shown is not None else _contiguous(self, head, i)[3])
        return np.concatenate(done[: step + 1])

    def differs_from_trace(self) -> tuple[int, ...]:
        """Query rows whose decode mask is not the scenario's: their outputs may differ from the Mix stage."""
        return tuple(int(i) for i in np.flatnonzero((self.allow != self.comp.scenario.allow).any(axis=1)))


def _attend(q: Matrix, K: Matrix, V: Matrix, allowed: BoolMatrix, divisor: float,
            options: Mapping[str, Any]) -> tuple[Matrix, Matrix, Matrix, Matrix, Matrix | None]:
    """The head's attention over a window, its parts' ``options`` to the softmax as the head's forward ran them
    (core/part_questions.softmax_options: ALiBi's bias added after scaling and after any soft-cap, a sink)."""
    a = attend(q, K, V, allowed, divisor, **options)
    return a.scores, a.scaled, a.softmax.weights, a.output, a.stepped  # (L, S), (L, S), (L, S), (L, d_v), (L, S)


def decode(comp: Computation, mode: str = "prefill", block_size: int | None = None,
           order: tuple[int, ...] | None = None) -> Decode:
    """Replay the scenario as prefill and decode with a paged KV cache, for every head.

    ``block_size`` and ``order`` (the pool's hand-out order) default to the scenario's [cache] settings.
    """
    sc = comp.scenario
    settings = sc.production
    ranges = tuple(schedule(sc.n, mode, settings.prefill_for(sc.n), settings.chunk_for(sc.n)))
    prefilled = 0 if mode == "tokens" else settings.prefill_for(sc.n)  # tokens before the first decode step
    allow, own = decode_mask(sc)
    block = settings.block_size if block_size is None else block_size
    cached = sc.m if sc.is_cross else sc.n
    blocks = pool_size(cached, block) if order is None else max(len(order), max(order, default=0) + 1)
    order = pool_order(blocks, settings.seed) if order is None else order

    # the block table is the sequence's, shared by every head (and, in a model, every layer)
    paging: list[Paging] = []
    table = empty_table(block, order)
    window = sc.window if sc.mask_kind == "sliding" and not sc.is_cross else None
    firsts = [0 if window is None else max(0, rng.start - window + 1) for rng in ranges]
    for i, rng in enumerate(ranges):
        if sc.is_cross:
            stop, start = (sc.m, 0) if i == 0 else (sc.m, sc.m)
        else:
            start, stop = rng.start, rng.stop
        # a rolling buffer: rows no query of this step can see leave before the new ones arrive
        table, freed = table.release(firsts[i])
        table, new = table.grow(stop) if stop > table.tokens else (table, ())
        paging.append(Paging(table, new, tuple(table.address(t) for t in range(start, stop)), blocks, freed))

    dec = Decode(comp, mode, ranges, allow, own, (), (), tuple(paging), tuple(firsts), prefilled)
    reference = Lazy(len(comp.heads), lambda h: _full(comp.heads[h], allow), keep=len(comp.heads))
    steps = tuple(Lazy(len(ranges), partial(_step, dec, h, blocks=blocks, block=block))
                  for h in range(len(comp.heads)))
    object.__setattr__(dec, "reference", reference)  # the steps read the Decode they belong to
    object.__setattr__(dec, "steps", steps)
    return dec


def _window(dec: Decode, head: int, i: int) -> tuple[Matrix, Matrix, Matrix, BoolMatrix, Matrix | None, int, int]:
    """(q, K, V, allowed, term, lo, S) of one step: the cached rows lo … S − 1 it reads, and what the head's
    parts add to their scores (ALiBi's bias)."""
    sc = dec.comp.scenario
    hr = dec.comp.heads[head]
    rng = dec.ranges[i]
    S = sc.m if sc.is_cross else rng.stop
    lo = dec.firsts[i]  # 0 unless a sliding window has let older rows go
    q = hr.Q_used[rng.start:rng.stop]  # (L, d_k) fresh at every step: Queries are never cached
    # Each row is what the model computes for that token alone (its projection, bias and rotation
    # at its position): the engine's rows. A step reads rows written at it or before it, never later ones.
    K_buf, V_buf = dec.cache(head)
    K, V = K_buf[lo:S], V_buf[lo:S]  # views, no copies
    allowed = dec.allow[rng.start:rng.stop, lo:S]  # (L, S − lo): row r is token start + r, bottom-right aligned
    added = ask.term(hr, slice(rng.start, rng.stop), slice(lo, S))
    return q, K, V, allowed, added, lo, S


def _options(dec: Decode, head: int, i: int) -> dict[str, object]:
    """What the head's parts give the softmax at one step: on the step's rows and the cached keys it reads."""
    rng, lo = dec.ranges[i], dec.firsts[i]
    S = dec.comp.scenario.m if dec.comp.scenario.is_cross else rng.stop
    return ask.softmax_options(dec.comp.heads[head], slice(rng.start, rng.stop), slice(lo, S))


def _contiguous(dec: Decode, head: int, i: int) -> tuple[Matrix, Matrix, Matrix, Matrix, Matrix | None]:
    """(scores, scaled, weights, output, stepped) of one step from the contiguous cache."""
    hr = dec.comp.heads[head]
    q, K, V, allowed, _, _, _ = _window(dec, head, i)
    return _attend(q, K, V, allowed, hr.scale, _options(dec, head, i))


def _full(hr: HeadResult, allow: BoolMatrix) -> Matrix:
    return _attend(hr.Q_used, hr.K_used, hr.V, allow, hr.scale, ask.softmax_options(hr))[3]


def _step(dec: Decode, h: int, i: int, blocks: int, block: int) -> DecodeStep:
    """One head at one step, with its paged copy: rows written through the step's block table, read back."""
    hr = dec.comp.heads[h]
    rng = dec.ranges[i]
    q, K, V, allowed, added, lo, S = _window(dec, h, i)
    scores, scaled, weights, output, stepped = _contiguous(dec, h, i)
    # the pool as it stands after this step: every row still cached sits where the block table put
    # it when its token arrived (a row's address never changes while it is cached)
    store = PagedStore(blocks, block, hr.d_k, hr.d_v)
    table = dec.paging[i].table
    store.write_rows(table, lo, K, V)
    K_paged, V_paged = store.gather(table, S, lo)
    paged = _attend(q, K_paged, V_paged, allowed, hr.scale, _options(dec, h, i))[3]
    computed, reused = dec.counts(i)
    # a step (the soft-cap's c·tanh(s/c)) moves no logit's error further than s's own (tanh' ≤ 1) and adds one
    # rounding, which the bound's two spare roundings per logit cover
    bound = rounding_bound(q, K, V, weights, hr.scale, added, allow=allowed)
    # a part after the map (the gate) is per query token: the step's new tokens compute theirs from their own x̂
    after = ask.again(hr, dec.comp.X_in[rng.start:rng.stop], output)
    return DecodeStep(i, h, rng.start, rng.stop, dec.kind(i), q, K, V, allowed, scores, scaled, weights, output,
                      dec.reference[h][rng.start:rng.stop], hr.output[rng.start:rng.stop], paged, computed, reused,
                      bound, lo, range(dec.firsts[i - 1] if i else 0, lo), stepped, after)
