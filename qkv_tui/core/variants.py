"""Modern attention's scenario keys (docs/scenario-format.md): norm, biases, RoPE, GQA, ALiBi, sliding windows, sinks.

The loader in :mod:`qkv_tui.core.scenario` hands each table to a parser here. Every rule of docs/scenario-format.md
fails with a one-line message naming the key, where it sits and what was expected, like the
rest of the format. The dataclasses hold what the engine needs and nothing else.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.arrays import Vector as Vector  # re-exported: the modules that read a Norm or Rope import it from here
from qkv_tui.kernels import rope as rope_kernel
from qkv_tui.kernels.sharing import kv_head_of as kv_head_of

NORM_KEYS = ("kind", "gamma", "beta", "eps")
NORM_KINDS = ("rms", "layer")
ROPE_KEYS = ("base", "layout", "positions")
ROPE_LAYOUTS = ("interleaved", "half")
ALIBI_KEYS = ("slopes",)
DEFAULT_EPS = 1e-5
# Keys with a twin in the other way of writing heads: one in the wrong table is a slip of form,
# so the message renames it rather than sending it to the other table.
LOOKALIKES = {
    ("[[heads]]", "sinks"): ("sink", "a [[heads]] table takes its own sink = <logit>;"
                                     " sinks = [...], one logit per query head, is the [attention] form"),
    ("[attention]", "sink"): ("sinks", "[attention] takes sinks = [...], one logit per query head;"
                                       " sink = <logit> is the [[heads]] form"),
    ("[attention]", "kv_head"): ("num_kv_heads", "[attention] says how many K/V heads the query heads share,"
                                                 " num_kv_heads = <count>; kv_head = <index> is the [[heads]] form"),
    ("[[heads]]", "num_kv_heads"): ("kv_head", "a [[heads]] table names the K/V head it reads, kv_head = <index>;"
                                               " num_kv_heads = <count> is the [attention] form"),
}
DEFAULT_BASE = 10000.0
MAX_INDEX = 2**53  # the largest position, window or K/V head index: every one is exact as a float64


class Checker(Protocol):
    """What the parsers need from the loader's validator (kept abstract to avoid an import cycle)."""

    def fail(self, message: str) -> Exception: ...

    def known(self, table: dict[str, Any], allowed: tuple[str, ...], where: str) -> None: ...

    def number(self, item: Any, where: str) -> float: ...


class HeadFeatures(Protocol):
    """What :func:`summary_parts` reads of a head (the loader's Head; abstract like Checker)."""

    @property
    def b_Q(self) -> Vector | None: ...

    @property
    def b_K(self) -> Vector | None: ...

    @property
    def b_V(self) -> Vector | None: ...

    @property
    def sink(self) -> float | None: ...


class Features(Protocol):
    """What :func:`summary_parts` reads of a Scenario: abstract like Checker, so this module never imports the loader."""

    @property
    def norm(self) -> Norm | None: ...

    @property
    def heads(self) -> Sequence[HeadFeatures]: ...

    @property
    def b_O(self) -> Vector | None: ...

    @property
    def rope(self) -> Rope | None: ...

    @property
    def num_kv_heads(self) -> int | None: ...

    @property
    def alibi(self) -> Alibi | None: ...

    @property
    def window(self) -> int | None: ...


@dataclass(frozen=True, eq=False)
class Norm:
    """Normalise each row of X before the projections (pre-norm)."""

    kind: str  # "rms" | "layer"
    gamma: Vector  # (d_model,) gains
    beta: Vector | None  # (d_model,) shifts, "layer" only; None = all 0
    eps: float  # added to the mean square (rms) or the variance (layer) under the root


@dataclass(frozen=True)
class Rope:
    """Rotary position embeddings on Q and K."""

    base: float  # θ_i = base^(−2i/d_k)
    layout: str  # "interleaved": pair i = (2i, 2i+1); "half": pair i = (i, i + d_k/2)
    positions: tuple[int, ...]  # one per token

    def pairs(self, d_k: int) -> list[tuple[int, int]]:
        """The dimensions rotated together, pair i first: what makes the two layouts differ."""
        return rope_kernel.pairs(self.layout, d_k)

    def theta(self, i: int, d_k: int) -> float:
        """Frequency of pair i: angles grow by this much per position."""
        return rope_kernel.theta(self.base, i, d_k)


@dataclass(frozen=True)
class Alibi:
    """ALiBi: a per-head linear bias slope·(j − i) added to the scaled scores."""

    slopes: tuple[float, ...]  # one per query head
    default: bool  # True when the slopes are the ALiBi paper's default (default_slopes)


def default_slopes(count: int) -> tuple[float, ...]:
    """The default slopes of the ALiBi paper's code (Press et al., ``get_slopes`` in ofirpress/attention_with_linear_biases),
    which BLOOM and MosaicBERT also use. For H a power of 2: the geometric sequence 2^(−8/H), 2^(−16/H), …, 2^(−8).
    Otherwise, with P the largest power of 2 below H: the P slopes for P heads, then every other slope of the
    sequence for 2P heads (its 1st, 3rd, 5th, …) until there are H. Three heads: 2^−4, 2^−8, then 2^−2."""

    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))  # 2^(−8/n), written as the paper's code writes it
        return [start * start**i for i in range(n)]

    if math.log2(count).is_integer():
        return tuple(power_of_2(count))
    closest = 2 ** math.floor(math.log2(count))
    return tuple(power_of_2(closest) + list(default_slopes(2 * closest)[0::2][: count - closest]))


def summary_parts(sc: Features) -> list[str]:
    """What ``--check`` adds to its one-line summary for the variant features a scenario uses."""
    parts = []
    if sc.norm is not None:
        parts.append(f"{sc.norm.kind} norm")
    if any(h.b_Q is not None or h.b_K is not None or h.b_V is not None for h in sc.heads) or sc.b_O is not None:
        parts.append("biases")
    if sc.rope is not None:
        parts.append(f"rope {sc.rope.layout}")
    if sc.num_kv_heads is not None:
        parts.append(f"{sc.num_kv_heads} K/V head{'s' if sc.num_kv_heads != 1 else ''}")
    if sc.alibi is not None:
        parts.append("alibi")
    if sc.window is not None:
        parts.append(f"window {sc.window}")
    if any(h.sink is not None for h in sc.heads):
        parts.append("sink")
    return parts


# --- parsers -----------------------------------------------------------------


def number(v: Checker, value: Any, key: str, expected: str = "a finite number") -> float:
    """A TOML integer or float, finite (the loader's own rules and wording); booleans are not numbers."""
    return v.number(value, key)


def numbers(v: Checker, value: Any, key: str, count: int, what: str) -> Vector:
    """A flat list of exactly ``count`` finite numbers (``what`` says what each is for)."""
    if not isinstance(value, list):
        raise v.fail(f"{key} must be a list of {count} number{'s' if count != 1 else ''} ({what}), got {_kind(value)}")
    if len(value) != count:
        raise v.fail(f"{key} has {len(value)} number{'s' if len(value) != 1 else ''}; expected {count} ({what})")
    out = [number(v, item, f"{key} item {i + 1}") for i, item in enumerate(value)]
    array = np.array(out, dtype=np.float64)
    array.setflags(write=False)
    return array


def table_of(v: Checker, doc: dict[str, Any], key: str) -> dict[str, Any] | None:
    if key not in doc:
        return None
    table = doc[key]
    if not isinstance(table, dict):
        raise v.fail(f"{key} must be a table ([{key}]), got {_kind(table)}")
    return table


def choice(v: Checker, value: Any, key: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        hint = difflib.get_close_matches(str(value), allowed, n=1, cutoff=0.5)
        extra = f"; did you mean {hint[0]!r}?" if hint else ""
        raise v.fail(f"{key} = {_show(value)} is not allowed; expected one of: {', '.join(map(repr, allowed))}{extra}")
    return value


def parse_norm(v: Checker, doc: dict[str, Any], d_model: int) -> Norm | None:
    table = table_of(v, doc, "norm")
    if table is None:
        return None
    v.known(table, NORM_KEYS, "[norm]")
    if "kind" not in table:
        raise v.fail("[norm] is missing 'kind'; expected kind = \"rms\" (RMSNorm) or \"layer\" (LayerNorm)")
    kind = choice(v, table["kind"], "[norm] kind", NORM_KINDS)
    ones = np.ones(d_model)
    ones.setflags(write=False)
    gamma = numbers(v, table["gamma"], "[norm] gamma", d_model, "one gain per column of X, d_model") if "gamma" in table else ones
    beta = None
    if "beta" in table:
        if kind == "rms":
            raise v.fail("[norm] beta is only used with kind = 'layer'; RMSNorm has no shift (remove beta or use 'layer')")
        beta = numbers(v, table["beta"], "[norm] beta", d_model, "one shift per column of X, d_model")
    eps = DEFAULT_EPS
    if "eps" in table:
        eps = number(v, table["eps"], "[norm] eps")
        if eps <= 0:
            raise v.fail(f"[norm] eps = {_show(table['eps'])}; expected a finite number > 0 (it keeps the root away from 0)")
    return Norm(kind, gamma, beta, eps)


def parse_rope(
    v: Checker, doc: dict[str, Any], tokens: tuple[str, ...], is_cross: bool, head_dks: Sequence[tuple[str, int]]
) -> Rope | None:
    table = table_of(v, doc, "rope")
    if table is None:
        return None
    v.known(table, ROPE_KEYS, "[rope]")
    if is_cross:
        raise v.fail("[rope] needs self-attention (keys and queries share positions); remove [context] or [rope]")
    for name, d_k in head_dks:
        if d_k % 2:
            raise v.fail(f"[rope] needs an even d_k (dimensions rotate in pairs), but {name} has d_k = {d_k}")
    widths: dict[int, list[str]] = {}
    for name, d_k in head_dks:
        widths.setdefault(d_k, []).append(name)
    if len(widths) > 1:
        def heads_with(names: list[str]) -> str:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            return f"{shown} {'has' if len(names) == 1 else 'have'}"

        said = "; ".join(f"{heads_with(names)} d_k = {d_k}" for d_k, names in widths.items())
        raise v.fail(f"[rope] needs every head to have the same d_k (the format keeps one set of frequencies"
                     f" θ_i = base^(−2i/d_k) for every head, as RoPE models do), but {said}; expected one d_k for every head")
    if "layout" not in table:
        raise v.fail(
            "[rope] is missing 'layout'; expected layout = \"interleaved\" (pairs (0,1), (2,3), …: RoFormer, Meta's LLaMA)"
            " or \"half\" (pairs (0, d_k/2), …: Hugging Face rotate_half)"
        )
    layout = choice(v, table["layout"], "[rope] layout", ROPE_LAYOUTS)
    base = DEFAULT_BASE
    if "base" in table:
        base = number(v, table["base"], "[rope] base")
        if base <= 0:
            raise v.fail(f"[rope] base = {_show(table['base'])}; expected a finite number > 0 (θ_i = base^(−2i/d_k))")
    n = len(tokens)
    positions = tuple(range(n))
    if "positions" in table:
        raw = table["positions"]
        if not isinstance(raw, list):
            raise v.fail(f"[rope] positions must be a list of {n} whole numbers >= 0 (one per token), got {_kind(raw)}")
        if len(raw) != n:
            raise v.fail(f"[rope] positions has {len(raw)} number{'s' if len(raw) != 1 else ''}; expected {n}, one per token")
        out = []
        for i, p in enumerate(raw):
            where = f"[rope] positions item {i + 1} ({json.dumps(tokens[i], ensure_ascii=False)})"
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise v.fail(f"{where} is {_kind(p)}; expected a whole number >= 0 (the token's position)")
            if p > MAX_INDEX:
                raise v.fail(f"{where} is {_show(p)}, too large; expected a position below 2^53")
            out.append(p)
        positions = tuple(out)
    return Rope(base, layout, positions)


def parse_alibi(
    v: Checker, doc: dict[str, Any], heads: int, is_cross: bool, mask: tuple[str, npt.NDArray[np.bool_]],
    tokens: tuple[str, ...], positions: tuple[int, ...],
) -> Alibi | None:
    """[alibi]; ``mask`` is the mask's kind and its (n, n) allow matrix, ``positions`` the tokens' positions."""
    table = table_of(v, doc, "alibi")
    if table is None:
        return None
    v.known(table, ALIBI_KEYS, "[alibi]")
    if is_cross:
        raise v.fail(
            "[alibi] needs self-attention (the bias uses the distance j − i between tokens); remove [context] or [alibi]"
        )
    if "slopes" in table:
        slopes = numbers(v, table["slopes"], "[alibi] slopes", heads, "one slope per head")
        alibi = Alibi(tuple(float(s) for s in slopes), False)
    else:
        alibi = Alibi(default_slopes(heads), True)
    alibi_mask(v, *mask, tokens, positions)
    return alibi


def alibi_later_key(allow: npt.NDArray[np.bool_], positions: Sequence[int]) -> tuple[int, int] | None:
    """The first allowed (query, key) cell whose key comes after the query, by index or by position."""
    n = len(positions)
    pos = np.asarray(positions)
    later = allow & ((np.arange(n)[None, :] > np.arange(n)[:, None]) | (pos[None, :] > pos[:, None]))  # (n, n)
    if not later.any():
        return None
    i, j = (int(x) for x in np.argwhere(later)[0])
    return i, j


def alibi_mask(v: Checker, kind: str, allow: npt.NDArray[np.bool_], tokens: tuple[str, ...],
               positions: tuple[int, ...]) -> None:
    """ALiBi's bias is defined for keys at or before the query (Press et al. §3, j ≤ i). A query that may
    attend a later key would get slope·(j − i) > 0 there: a bonus for the later key, and since softmax
    ignores what a row adds to every cell, the query's own position would stop mattering. So every
    allowed cell must have j ≤ i, and no later position (rope's ``positions``) than its query."""
    found = alibi_later_key(allow, positions)
    if found is None:
        return
    i, j = found
    q, k = json.dumps(tokens[i], ensure_ascii=False), json.dumps(tokens[j], ensure_ascii=False)
    if j > i:
        cell = f"query {i + 1} ({q}) may attend key {j + 1} ({k}), which comes after it"
        expected = ("mask = \"causal\", a sliding window, or a padding or custom mask that allows no key"
                    " after its query")
    else:
        cell = (f"query {i + 1} ({q}, position {positions[i]}) may attend key {j + 1} ({k}),"
                f" whose [rope] position {positions[j]} is later")
        expected = "[rope] positions that never decrease from one token to the next"
    raise v.fail(
        f"[alibi] needs a mask under which no query attends a later key, but with mask {kind!r} {cell}:"
        " there slope·(j − i) is positive, so the bias favours later keys rather than nearer ones;"
        f" Press et al. define the bias for keys j ≤ i only. Expected {expected}"
    )


def parse_window(v: Checker, table: dict[str, Any], is_cross: bool) -> int:
    """The sliding window of a ``kind = "sliding"`` mask."""
    if is_cross:
        raise v.fail("mask kind 'sliding' needs self-attention (a window over the same tokens); remove [context] or the mask")
    if "window" not in table:
        raise v.fail("mask kind 'sliding' needs window = W (a whole number >= 1: each token sees itself and the W−1 before it)")
    window = table["window"]
    if isinstance(window, bool) or not isinstance(window, int):
        raise v.fail(f"[mask] window is {_kind(window)}; expected a whole number >= 1 (itself and the window−1 tokens before it)")
    if window < 1:
        raise v.fail(f"[mask] window is {_show(window)}, too small; expected a whole number >= 1 (each token sees itself"
                     " and the window−1 tokens before it)")
    if window > MAX_INDEX:
        raise v.fail(f"[mask] window is {_show(window)}, too large; expected a whole number from 1 to 2^53"
                     " (a window as long as the text is already the causal mask)")
    return window


def sliding_allow(n: int, window: int) -> npt.NDArray[np.bool_]:
    """Query i may attend key j when 0 ≤ i − j < window (token indices, not rope positions)."""
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    allow: npt.NDArray[np.bool_] = (i - j >= 0) & (i - j < window)  # (n, n)
    return allow


def parse_sink(v: Checker, table: dict[str, Any], key: str) -> float | None:
    if "sink" not in table:
        return None
    return number(v, table["sink"], key, "a finite number (the sink's logit)")


def parse_sinks(v: Checker, table: dict[str, Any], heads: int) -> tuple[float | None, ...]:
    if "sinks" not in table:
        return (None,) * heads
    sinks = numbers(v, table["sinks"], "[attention] sinks", heads, "one sink logit per query head, num_heads")
    return tuple(float(s) for s in sinks)


def parse_bias(v: Checker, table: dict[str, Any], role: str, where: str, width: int, what: str) -> Vector | None:
    """``b_Q``, ``b_K``, ``b_V`` or ``b_O``: one number per column of its projection."""
    key = f"b_{role}"
    if key not in table:
        return None
    return numbers(v, table[key], f"{where} {key}", width, what)


def parse_num_kv_heads(v: Checker, table: dict[str, Any], num_heads: int) -> int:
    if "num_kv_heads" not in table:
        return num_heads
    count = table["num_kv_heads"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise v.fail(f"[attention] num_kv_heads must be a whole number >= 1, got {_kind(count)}")
    if num_heads % count:
        raise v.fail(
            f"[attention] num_kv_heads = {count} does not divide num_heads = {num_heads};"
            " expected a divisor (each K/V head serves the same number of query heads)"
        )
    return count
