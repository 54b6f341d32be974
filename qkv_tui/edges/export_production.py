"""The Markdown page's production sections: prefill and decode over a paged KV cache, and FlashAttention's tiles.

The lines are the app's own (display/decode_view.py, display/tiled_view.py), so every one of them
checks out on a calculator as it does on screen.
"""

from __future__ import annotations

from qkv_tui.core.engine import Computation
from qkv_tui.core.part_questions import refusal
from qkv_tui.display.decode_view import decode_lines, mask_note, reference_name, step_title
from qkv_tui.display.state_view import carries_state, state_section
from qkv_tui.display.tiled_view import MEANING, op_lines
from qkv_tui.teach.decode import decode
from qkv_tui.teach.tiled import PHASE_NAMES, memory_line, tiled

WORKED_STEPS = 8  # cache steps worked line by line; the rest are checked, not printed
WORKED_BLOCKS = 2  # query blocks worked tile by tile: enough to see a rescale, a skip and a second block


def cache_section(comp: Computation, decimals: int = 3) -> list[str]:
    """Prefill, then decode, over a paged cache: each step's lines and its checks."""
    sc = comp.scenario
    settings = sc.production
    dec = decode(comp, "prefill")
    chunked = decode(comp, "chunked")
    out = ["## KV cache: prefill, decode and a paged cache", ""]
    if sc.is_cross:
        out.append("Cross-attention: the context's Keys and Values are computed once, at the first step, and only"
                   " read after that; nothing is added to that cache as the query tokens are processed.")
    else:
        out.append(f"The first {settings.prefill_for(sc.n)} tokens are prefilled at once (a causal block), then the"
                   " rest are decoded one a step (in a model, each decode step feeds the token the model has just"
                   " produced; here the sentence's next word stands in for it). Each step's Queries are computed"
                   " fresh; their Key and Value rows are written to the cache and earlier rows are reused, not"
                   " recomputed.")
    out += ["", f"The cache is paged: blocks of {dec.block_size} token rows in a pool of {dec.paging[0].pool} physical"
            f" blocks, handed out in the order {list(dec.paging[0].table.physical + dec.paging[0].table.free)}"
            f" (seed {settings.seed}); a sequence's block table maps its logical blocks to physical ones.", ""]
    note = mask_note(dec)
    if note:
        out += [note, ""]
    for h in range(len(comp.heads)):
        if len(comp.heads) > 1:
            out += [f"### {comp.heads[h].name}", ""]
        for i in range(min(dec.count, WORKED_STEPS)):
            out.append(f"- step {i + 1}, {step_title(dec, dec.steps[h][i])}:")
            out += [f"    {line}" for line in decode_lines(dec, i, h, decimals)]
        if dec.count > WORKED_STEPS:
            ok = all(s.matches and s.paged_check[0] for s in dec.steps[h])
            out.append(f"- steps {WORKED_STEPS + 1} to {dec.count}: {'✓' if ok else '✗'} each equal to"
                       f" {reference_name(dec)} within float64 rounding, and unchanged by paging")
        out.append("")
    if not sc.is_cross:
        sizes = " + ".join(str(len(r)) for r in chunked.ranges[: len(chunked.ranges) - (sc.n - settings.prefill_for(sc.n))])
        ok = all(s.matches for steps in chunked.steps for s in steps)
        out += [f"Chunked prefill in chunks of {settings.chunk_for(sc.n)} ({sizes} tokens, then decode):"
                f" {'✓' if ok else '✗'} every output equal to {reference_name(chunked)} within float64 rounding."
                " Each chunk's queries are the last L of the S cached keys, so the causal mask is aligned"
                " bottom-right (offset S − L), as FlashAttention ≥ 2.1 and vLLM align it (PyTorch:"
                " causal_lower_right); aligned top-left, as PyTorch's is_causal=True (causal_upper_left) does with"
                " fewer queries than keys, a decode query would see only key 0.", ""]
    return out


def tiled_section(comp: Computation, decimals: int = 3) -> list[str]:
    """FlashAttention's online softmax: the first query block worked tile by tile, every block checked."""
    sc = comp.scenario
    out = ["## FlashAttention: tiled online softmax", "",
           f"Keys and Values arrive in tiles of B = {sc.production.tile}; each block of B query rows keeps a running"
           " max m, a running sum ℓ and an output accumulator Õ, and never forms the full score matrix."
           f" {MEANING['rescale']}", ""]
    for h in range(len(comp.heads)):
        th = tiled(comp, h)
        hr = comp.heads[h]
        if len(comp.heads) > 1:
            out += [f"### {hr.name}", ""]
        for qb in range(min(len(th.blocks), WORKED_BLOCKS)):
            start, stop = th.offsets[qb], th.offsets[qb + 1]
            for i in range(start, stop):
                op = th.op(i)
                where = f"tile {op.visit.ktile + 1}" if op.visit is not None else "end"
                out.append(f"- block {qb + 1}, {where}, {PHASE_NAMES[op.phase]}:")
                out += [f"    {line}" for line in op_lines(th, op, decimals)]
        if len(th.blocks) > WORKED_BLOCKS:
            out.append(f"- blocks {WORKED_BLOCKS + 1} to {len(th.blocks)}: the same six operations per tile")
        if th.skipped:
            out.append(f"- tiles skipped (the mask forbids every cell): {th.skipped} of {th.total_tiles}")
        ok, check = th.check()
        out += [f"- {'✓ equal to' if ok else '✗ DIFFERENT from'} the Mix stage {check}, every block",
                f"- {memory_line(sc.n, sc.m, th.tile, hr.d_v)}", ""]
    return out


def production_sections(comp: Computation, decimals: int = 3) -> list[str]:
    if carries_state(comp):  # [linear], [deltanet]: decoding carries a state; there are no tiles
        return state_section(comp, decimals)
    refused = [line for view in ("cache", "tiles") if (line := refusal(comp.heads, view)) is not None]
    if refused:  # a head's part refuses them: one line each, not numbers of a softmax it does not take
        return ["## Decoding and tiles", "", *(f"- {line}" for line in dict.fromkeys(refused)), ""]
    return cache_section(comp, decimals) + tiled_section(comp, decimals)
