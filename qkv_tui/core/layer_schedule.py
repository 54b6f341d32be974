"""``[input] schedule``: which attention each layer of the model runs, shown with the scenario's layer marked.

An importer writes one entry per layer (importers/schedule.py): "full", "sliding W", "linear", "mlp" (a block with
no attention at all: Nemotron-H's MLP and mixture-of-experts layers), with
" no-rope" after full or sliding where the layer leaves RoPE out, and " kv-from L" last where the layer computes
no K and V of its own but reuses layer L's (Gemma 3n's cross-layer KV sharing; docs/scenario-format.md). The app
and the Markdown export show it as one line, compressed into runs where a schedule is long:
``layers: 0–4 S · 5 F · [6 S] · … (S sliding 512, F full)``.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_ITEMS = 12  # past this many runs, the line keeps both ends and the chosen layer's neighbourhood
NO_ROPE = "no-rope"
STATE = "linear"  # the entry of a layer that keeps a fixed state in place of a cache
NO_ATTENTION = "mlp"  # the entry of a layer with no attention (an MLP block of a hybrid): no cache, no state


def attends(entry: str) -> bool:
    """Whether a schedule entry's layer has any attention (softmax or linear) at all."""
    return entry != NO_ATTENTION


def keeps_state(entry: str) -> bool:
    """Whether a schedule entry's layer keeps a fixed state in place of a cache (linear attention's)."""
    return entry.split(" ")[0] == STATE


KV_FROM = "kv-from"


def kv_source(entry: str) -> int | None:
    """The layer whose K and V a (valid) entry's layer reuses, or None where it computes its own."""
    words = entry.split(" ")
    return int(words[-1]) if len(words) >= 3 and words[-2] == KV_FROM else None


def _own(words: list[str]) -> list[str]:
    """The entry's words without a trailing " kv-from L"."""
    return words[:-2] if len(words) >= 3 and words[-2] == KV_FROM else words


def _which(layers: list[int]) -> str:
    said = ", ".join(map(str, layers[:-1])) + (f" and {layers[-1]}" if len(layers) > 1 else str(layers[-1]))
    return f"layer{'s' * (len(layers) > 1)} {said}"


def single_adds(schedule: Sequence[str], layer: int) -> str | None:
    """What each of layers 0 … layer − 1 added to the stream, from the schedule, where the model's blocks hold one
    sub-layer each: a schedule with an "mlp" entry (Nemotron-H's attention, Mamba-2 and MLP blocks); else None."""
    if NO_ATTENTION not in schedule or not 0 < layer <= len(schedule):
        return None
    kinds: dict[str, list[int]] = {"attention": [], "linear": [], NO_ATTENTION: []}
    for i, entry in enumerate(schedule[:layer]):
        word = entry.split(" ")[0]
        kinds["attention" if word in ("full", "sliding") else word].append(i)
    words = {"attention": "attention", "linear": "a linear-attention mixer, Mamba-2's in Nemotron-H",
             NO_ATTENTION: "an MLP or a mixture of experts"}
    said = "; ".join(f"{_which(found)} {words[kind]}" for kind, found in kinds.items() if found)
    return f"the output of its one sub-layer ({said})"


def entry_error(entry: object) -> str | None:
    """Why ``entry`` is not a schedule entry, or None."""
    if not isinstance(entry, str):
        return "expected a string"
    words = entry.split(" ")
    if len(words) >= 3 and words[-2] == KV_FROM:
        if not (words[-1].isdigit() and (words[-1] == "0" or words[-1][0] != "0") and len(words[-1]) <= 16):
            return "expected ' kv-from L' to name a layer L, a whole number"
        words = words[:-2]
        if words[:1] == ["linear"]:
            return "a linear layer keeps a state, not K and V another layer could reuse; expected 'full' or 'sliding W'"
        if words[:1] == [NO_ATTENTION]:
            return "an mlp layer has no attention, so no K and V another layer could reuse; expected 'full' or 'sliding W'"
    if words and words[-1] == NO_ROPE and words[0] in ("full", "sliding"):
        words = words[:-1]
    if words in (["full"], ["linear"], [NO_ATTENTION]):
        return None
    if len(words) == 2 and words[0] == "sliding" and words[1].isdigit() and words[1][0] != "0" and len(words[1]) <= 16:
        return None
    return ("expected 'full', 'sliding W' (W a whole number >= 1), 'linear' or 'mlp', with ' no-rope' after full or"
            " sliding and ' kv-from L' last")


def _letter(entry: str, windows: set[str]) -> str:
    words = _own(entry.split(" "))
    reused = "R" if kv_source(entry) is not None else ""
    if words[0] == "linear":
        return "L"
    if words[0] == NO_ATTENTION:
        return "-"  # Nemotron-H's own character for an MLP layer (hybrid_override_pattern)
    nope = words[-1] == NO_ROPE
    if words[0] == "full":
        return ("N" if nope else "F") + reused
    shown = "S" if len(windows) == 1 else f"S{words[1]}"
    return shown + ("N" if nope else "") + reused


def _legend(schedule: Sequence[str], windows: set[str]) -> str:
    kinds = {e.split(" ")[0] for e in schedule}
    nope = any(_own(e.split(" "))[-1] == NO_ROPE for e in schedule)
    parts = []
    if "sliding" in kinds:
        parts.append(f"S sliding {windows.pop()}" if len(windows) == 1 else "S<W> sliding, window W")
    if any(_own(e.split(" ")) == ["full"] for e in schedule):
        parts.append("F full")
    if nope:
        parts.append("N no RoPE")
    if "linear" in kinds:
        parts.append("L linear attention")
    if NO_ATTENTION in kinds:
        parts.append("- MLP only, no attention")
    if any(kv_source(e) is not None for e in schedule):
        parts.append("R reuses an earlier layer's K and V")
    return ", ".join(parts)


def schedule_line(schedule: Sequence[str], chosen: int) -> str:
    """``layers: 0 S · 1 S · [2 F] · 3 S (S sliding 4096, F full)``: runs of one kind share a range."""
    windows = {e.split(" ")[1] for e in schedule if e.startswith("sliding")}
    letters = [_letter(e, set(windows)) for e in schedule]
    runs: list[tuple[int, int]] = []  # [first, last] layers of one letter, the chosen layer alone
    for i, letter in enumerate(letters):
        if runs and letters[runs[-1][0]] == letter and chosen not in (i, runs[-1][1]):
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    items = []
    for first, last in runs:
        span = str(first) if first == last else f"{first}–{last}"
        item = f"{span} {letters[first]}"
        items.append(f"[{item}]" if first == chosen else item)
    if len(items) > MAX_ITEMS:
        at = next(k for k, (first, _) in enumerate(runs) if first == chosen)
        keep = sorted({0, 1, len(items) - 2, len(items) - 1} | set(range(max(0, at - 3), min(len(items), at + 4))))
        shown: list[str] = []
        for k, index in enumerate(keep):
            if k and index != keep[k - 1] + 1:
                shown.append("…")
            shown.append(items[index])
        items = shown
    return f"layers: {' · '.join(items)} ({_legend(schedule, windows)})"
