"""The cost view (c): what the scenario's attention costs, a page per step (→ ←): prefill, one decode step, the
KV cache, FlashAttention's memory traffic, MLA's expanded and absorbed forms (with [mla]) and a roofline.

Every figure is printed as its formula with its numbers (core/cost.py's Figure), so it recomputes on a
calculator from what the line shows. The counts come from each stage's own cost face (teach/cost.py).
"""

from __future__ import annotations

import importlib
import math
from itertools import groupby
from types import ModuleType

from qkv_tui.core import part_questions as ask
from qkv_tui.core.cost import ACCELERATORS, DECODE, PREFILL, Accelerator, Count, bound, mib, shapes
from qkv_tui.core.scenario import Scenario
from qkv_tui.display import side_views
from qkv_tui.display.frame import Frame
from qkv_tui.display.modes import Modes
from qkv_tui.display.side_view import Sources
from qkv_tui.display.view import Explanation
from qkv_tui.teach.cost import CHOSEN, SRAM_BYTES, CostReport, report

PAGES = ("prefill", "decode", "cache", "flash", "roofline")  # a table's own page (its ``cost_face``) before the roofline
MEANINGS = {
    "prefill": "Prefill: every token of the prompt at once. A product of m×n by n×p costs 2mnp FLOPs (a multiply and"
               " an add per term), masked cells included; exponentials, divisions and roots are counted apart. Bytes:"
               " each input a stage reads once and each output it writes once. Intensity = FLOPs per byte moved.",
    "decode": "Decode: one new token against the whole context. The new token's row is tiny, but every cached Key and"
              " Value is read again: the bytes grow with the context while the FLOPs per byte stay near 1, so"
              " decoding waits on memory, not on arithmetic.",
    "cache": "The KV cache: what decoding keeps per token and per layer, Σ over the K/V heads of (d_k + d_v)·bytes."
             " Fewer K/V heads (GQA, MQA) shrink it by h/h_kv; MLA caches one latent of d_c + d_rope for every head;"
             " a sliding window keeps only its last W tokens; linear and delta-rule layers keep a fixed state instead.",
    "flash": "FlashAttention computes the same softmax(QKᵀ/√d)V but never writes the N×N scores and weights to memory:"
             " it streams tiles of K and V through on-chip SRAM with the online softmax (the tiles view, t). Dao et al."
             " 2022, Theorem 2: standard attention moves Θ(Nd + N²) numbers, FlashAttention Θ(N²d²/M) at SRAM size M.",
    "roofline": "The roofline: a stage runs at min(peak FLOP/s, bandwidth × intensity). Left of the ridge (peak ÷"
                " bandwidth) it waits on memory; right of it, on arithmetic. Prefill's products of many rows sit"
                " right, decode's one row sits far left. Peaks: dense 16-bit tensor figures from each vendor's"
                " datasheet (docs/cost.md).",
}


def _report(sources: Sources) -> CostReport:
    return sources.kept(("cost", CHOSEN.dtype, CHOSEN.context),
                        lambda: report(sources.comp, CHOSEN.dtype, CHOSEN.context))


def _own(sc: Scenario) -> ModuleType | None:
    """The display module of a table's own page and lines (its ``cost_face``: ``PAGE``, ``MEANING``, ``page``,
    ``cache_lines``); None without one. It loads with a scenario that has the table."""
    module = ask.scenario_says(sc, "cost_face")
    return None if module is None else importlib.import_module(module)


def _pages(sources: Sources) -> list[str]:
    own = _own(sources.comp.scenario)
    return [*PAGES[:-1], *([] if own is None else [own.PAGE]), PAGES[-1]]


def _steps(sources: Sources, modes: Modes, head: int) -> int:
    return len(_pages(sources))


def num(x: float) -> str:
    """A ratio as printed: 3 significant digits, enough to check on a calculator at the shown precision."""
    return f"{x:.3g}" if x < 1000 else f"{x:.0f}"


def intensity_line(c: Count) -> str:
    moved = c.read.value + c.written.value
    return f"({c.matmul.value} + {c.other.value}) / ({c.read.value} + {c.written.value}) = {num(c.intensity)}" \
        if moved else "no bytes"


def stage_lines(c: Count) -> list[str]:
    return [f"{c.name}:",
            f"  FLOPs {c.matmul.text()}" + (f"; other ops {c.other.text()}" if c.other.value else ""),
            f"  read {c.read.text()} B; written {c.written.text()} B",
            f"  intensity {intensity_line(c)} FLOP/B"]


def two_forms(sc: Scenario) -> list[str]:
    """Where the trace shows one attention computed two ways, a model runs one of them: the totals count both (as
    the table that computes it twice says, its ``two_forms``)."""
    said = ask.scenario_says(sc, "two_forms")
    return [] if said is None else [said]


def _phase_page(sources: Sources, r: CostReport, phase: str) -> tuple[str, list[str]]:
    ph = r.prefill if phase == PREFILL else r.decode
    counts = r.phase(phase)
    lines: list[str] = []
    for c in counts:
        lines += stage_lines(c)
    flops = sum(c.matmul.value for c in counts)
    other = sum(c.other.value for c in counts)
    moved = sum(c.read.value + c.written.value for c in counts)
    lines.append(f"total: FLOPs {' + '.join(str(c.matmul.value) for c in counts)} = {flops}; other ops {other};"
                 f" bytes {' + '.join(str(c.read.value + c.written.value) for c in counts)} = {moved}")
    lines += [f"{u.name}: not counted ({u.reason})" for u in r.uncounted]
    lines += two_forms(sources.comp.scenario)
    if phase == PREFILL:
        head = f"Prefill of n = {ph.rows} tokens against m = {ph.keys} keys, {r.dtype} (B = {ph.bytes} bytes a number)"
        head += _attending(ph.attended)
    else:
        at_window = " (capped at the window)" if ph.keys < r.context and ph.new else ""
        head = (f"Decode: 1 new token against N = {ph.keys} keys{at_window}, context {r.context} (--context),"
                f" {r.dtype} (B = {ph.bytes})") + _attending(ph.attended)
    return head, lines


def _attending(attended: tuple[str, int] | None) -> str:
    """Where a part selects the keys (the indexer's top_k): how many of them each row's heads attend."""
    return "" if attended is None else f"; the heads attend {attended[0]} = {attended[1]} of them a row"


def _cache_page(sources: Sources, r: CostReport) -> tuple[str, list[str]]:
    sc = sources.comp.scenario
    kv = r.kv
    lines: list[str] = []
    for (kind, text), group in groupby(kv.layers, key=lambda layer: (layer.kind, layer.per_token.text())):
        layers = list(group)
        span = str(layers[0].layer) if len(layers) == 1 else f"{layers[0].layer}–{layers[-1].layer}"
        kept = f"min({r.context}, {layers[0].window})" if layers[0].window is not None else str(r.context)
        lines.append(f"layer{'s' if len(layers) > 1 else ''} {span} ({kind}): {text} B a token; at the context"
                     f" {kept}·{layers[0].per_token.value} = {layers[0].at(r.context)} B each")
        if layers[0].state is not None:
            lines.append(f"  its fixed state instead: {layers[0].state.text()} B, at any context")
        elif layers[0].keeps_state:
            lines.append("  its fixed state instead: its sizes are a linear layer's, not in the layer shown (--layer"
                         f" {layers[0].layer} counts it)")
    if kv.unknown:
        shown = ", ".join(map(str, kv.unknown[:8])) + (", …" if len(kv.unknown) > 8 else "")
        lines.append(f"layers {shown}: softmax attention, not counted here: their K/V heads are not in this linear"
                     f" layer (--layer {kv.unknown[0]} counts them)")
    per = [str(layer.per_token.value) for layer in kv.layers]
    short = " + ".join(per) if len(per) <= 6 else f"{len(per)} layers"
    lines.append(f"per token: {short} = {kv.per_token} B")
    lines.append(f"at the context: {kv.at_context} B = {mib(kv.at_context)}")
    s = shapes(sc)
    own = _own(sc)
    # the layer shown's own cache, not layer 0's: a hybrid's layer 0 may cache nothing (Qwen3.5's, Nemotron-H's)
    cached = next((lc for lc in kv.layers if lc.layer == sc.input.chosen_layer), kv.layers[0]).per_token.value
    if ask.scenario_says(sc, "cache_kind") is None and len(s.kv) < s.h and cached:  # K/V heads cached, fewer than heads
        mha = sum(dk + dv for dk, dv in s.heads) * r.bytes_per_number
        lines.append(f"why GQA: were every query head its own K/V head, a layer would cache Σ(d_k + d_v)·B ="
                     f" {sum(dk + dv for dk, dv in s.heads)}·{r.bytes_per_number} = {mha} B a token, not"
                     f" {cached}: {mha} / {cached} = {num(mha / cached)} times as much")
    if own is not None:
        lines += own.cache_lines(sc, r)
    lines += kv.notes
    lines.append(f"counted from {kv.held}")
    head = f"KV cache: {kv.per_token} B per token over {len(kv.layers)} layer{'s' if len(kv.layers) > 1 else ''}," \
           f" {mib(kv.at_context)} at {r.context} tokens"
    return head, lines


def _flash_page(r: CostReport) -> tuple[str, list[str]]:
    if r.flash is None:
        return "FlashAttention: no N×N matrix here", ["these heads keep a running state instead of a softmax over"
                                                      " every key: there is no score matrix to keep out of memory"]
    t = r.flash
    b = r.bytes_per_number
    M = SRAM_BYTES // b
    std, fl = t.standard.value, t.flash.value
    lines = [f"one head, N = {r.context} tokens (--context), d = {r.flash_d}, SRAM M = {SRAM_BYTES} / {b} = {M}"
             f" numbers ({SRAM_BYTES} B: 192 KiB of an H100 SM's up to 228 KiB of shared memory, at {b} B a number)",
             f"standard (Algorithm 0: write S, read S, write P, read P): 4Nd + 4N² = {t.standard.text(False)} numbers",
             f"Flash (Algorithm 1): B_c = ⌈M / 4d⌉ = ⌈{M} / {4 * r.flash_d}⌉ = {t.block} keys a tile,"
             f" T_c = ⌈N / B_c⌉ = ⌈{r.context} / {t.block}⌉ = {t.passes} pass{'es' if t.passes != 1 else ''}",
             f"  K, V once; Q, O read and O written and ℓ, m read and written each pass: 2Nd + T_c·(3Nd + 4N) ="
             f" {t.flash.text(False)} numbers",
             f"in bytes: standard {std}·{b} = {std * b} B, Flash {fl}·{b} = {fl * b} B: {std} / {fl} ="
             f" {num(std / fl)} times less traffic",
             "both do the same 4N²d FLOPs of QKᵀ and PV; Flash also recomputes nothing in the forward pass",
             *kept_lines(r.context, r.flash_d, b)]
    return f"FlashAttention's memory traffic against standard attention's, at N = {r.context}", lines


def kept_lines(N: int, d: int, b: int) -> list[str]:
    """Why a model's attention matrix is not there to read: what a fused kernel keeps, what P would take, and what
    rebuilding P from the logsumexp L costs."""
    kept, p = N * d + N, N * N
    return [f"why the attention matrix is not kept: a fused kernel writes only O and each row's logsumexp L, N·d + N ="
            f" {N}·{d} + {N} = {kept} numbers a head; keeping P too adds N² = {N}·{N} = {p} numbers,"
            f" {p}·{b} = {p * b} B a head",
            f"P rebuilt from L on demand, P = e^(QKᵀ/√d − L): the scores again, 2·N·N·d = 2·{N}·{N}·{d} ="
            f" {2 * N * N * d} FLOPs, and N² = {N}·{N} = {p} exponentials (the tiles view, t, ends its forward pass"
            " with L = m + ln ℓ for every row and P rebuilt from it; the built-in fused_kernel)"]


def _ridge_line(acc: Accelerator) -> str:
    return (f"{acc.name}: ridge {acc.peak / 1e12:g}e12 / {acc.bandwidth / 1e12:g}e12 = {num(acc.ridge)} FLOP/B")


COLS, ROWS = 44, 9  # the picture's plot area: fits the explanation at 80 columns
LOW, HIGH = -2, 4  # log10 of the intensity axis, 0.01 to 10 000 FLOP/B


def picture(acc: Accelerator, points: list[tuple[str, float]]) -> list[str]:
    """A log-log roofline: attainable FLOP/s against intensity, with each stage's letter at its intensity."""
    top = math.log10(acc.peak)
    bottom = top - 4
    grid = [[" "] * COLS for _ in range(ROWS)]

    def col(i: float) -> int:
        return min(COLS - 1, max(0, round((math.log10(max(i, 10.0**LOW)) - LOW) / (HIGH - LOW) * (COLS - 1))))

    def row(flops: float) -> int:
        return min(ROWS - 1, max(0, round((top - math.log10(max(flops, 1.0))) / (top - bottom) * (ROWS - 1))))

    for c in range(COLS):
        i = 10 ** (LOW + c / (COLS - 1) * (HIGH - LOW))
        grid[row(acc.attainable(i))][c] = "─" if acc.bandwidth * i >= acc.peak else "╱"
    for letter, i in points:
        grid[row(acc.attainable(i))][col(i)] = letter
    ridge = col(acc.ridge)
    lines = [f"│{''.join(r)}" for r in grid]
    lines[0] += f" {acc.peak / 1e12:g} TFLOP/s"
    axis = "└" + "".join("┴" if c == ridge else "─" for c in range(COLS))
    ticks = [" "] * (COLS + 6)
    for power in range(LOW, HIGH + 1):
        label = f"{10.0**power:g}"
        at = 1 + round((power - LOW) / (HIGH - LOW) * (COLS - 1))
        for k, ch in enumerate(label):
            if at + k < len(ticks):
                ticks[at + k] = ch
    return [*lines, axis, "".join(ticks).rstrip() + "  FLOP/B"]


def verdict(c: Count) -> str:
    """Which accelerators a stage waits on memory on: all, none, or the ones named."""
    memory = [a.name for a in ACCELERATORS if bound(c, a) == "memory-bound"]
    if len(memory) == len(ACCELERATORS):
        return "memory-bound on all four"
    if not memory:
        return "compute-bound on all four"
    return f"memory-bound on {', '.join(memory)}, compute-bound on the others"


def _roofline_page(r: CostReport) -> tuple[str, list[str]]:
    lines = [_ridge_line(acc) for acc in ACCELERATORS]
    acc = ACCELERATORS[0]
    points: list[tuple[str, float]] = []
    legend: list[str] = []
    decode = {c.stage: c for c in r.phase(DECODE)}
    for k, c in enumerate(r.long):
        small = decode.get(c.stage)
        if c.intensity <= 0 and (small is None or small.intensity <= 0):
            continue
        letter = chr(ord("A") + k)
        points.append((letter, c.intensity))
        legend.append(f"{letter} {c.name}, prefill of {r.context}: {intensity_line(c)} FLOP/B, {verdict(c)}")
        if small is not None:
            points.append((letter.lower(), small.intensity))
            legend.append(f"{letter.lower()} {c.name}, decode: {intensity_line(small)} FLOP/B, {verdict(small)}")
    lines += [f"on the {acc.name}: capitals a prefill of N = {r.context} tokens (--context), small letters one decode"
              " step at that context", *picture(acc, points), *legend]
    return f"Roofline: a prefill of {r.context} tokens against one decode step at N = {r.decode.keys}", lines


def _frame(sources: Sources, modes: Modes, step: int, head: int) -> Frame:
    r = _report(sources)
    pages = _pages(sources)
    page = pages[min(step, len(pages) - 1)]
    if page in (PREFILL, DECODE):
        title, lines = _phase_page(sources, r, page)
    elif page == "cache":
        title, lines = _cache_page(sources, r)
    elif page == "flash":
        title, lines = _flash_page(r)
    elif page == "roofline":
        title, lines = _roofline_page(r)
    else:  # a table's own page
        own = _own(sources.comp.scenario)
        assert own is not None
        title, lines = own.page(sources, r)
    # a table may say a phase's meaning for itself (the indexer's decode reads top_k keys, not every one)
    said = ask.scenario_says(sources.comp.scenario, f"{page}_meaning")
    meaning = said or (MEANINGS[page] if page in MEANINGS else str(getattr(_own(sources.comp.scenario), "MEANING", "")))
    ex = Explanation(stage_label=f"Cost {step + 1}/{len(pages)} {page}", counter="", head_label="", arithmetic=title,
                     details=tuple(lines), meaning=meaning, formula=(("FLOPs = 2mnp; bytes = numbers·B", False),))
    return Frame(ex, [], [], (), "")


VIEW = side_views.BY_NAME["cost"]  # declared there (its key, words and help); its behaviour is here
