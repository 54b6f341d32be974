"""``--stages NAME,NAME`` and ``--heads N,N`` on a worksheet: which tables the sheet asks about (docs/worksheets.md).

``--stages`` takes the stage bar's names in any case (``Softmax``, ``dSoftmax``), a range of them in the bar's order
(``score..softmax``), and the groups ``forward`` and ``backward``; ``sgd`` names the SGD step that ends a backward
sheet (in the ``backward`` group too). ``--heads`` counts the heads as ``--head`` does, from 1, as the status line's
(2/2); a real model's own head numbers, from 0, are what ``--heads`` means beside ``--model``.

A table is *asked* (its cells may be blank) when its stage is chosen and it belongs to a chosen head; a table of
no head (Concat, W_O, the loss, dX̂, the norm) is asked unless it reads a table of a head left out. Every other
table is printed only where an asked table reads it, and then whole, as given: so a backward-only sheet prints the
forward numbers its gradients need and none of the rest. A weight's gradient whose weight the [backward] table does
not train (no SGD step reads it) is asked only where its stage is named by itself or in a range, not through the
``backward`` group, and no other asked table reads it: the group asks what the Train view's step moves.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from qkv_tui.core.engine import Computation
from qkv_tui.edges.faces import faces
from qkv_tui.teach.stages.printed import Table
from qkv_tui.teach.trace import Trace

FORWARD, BACKWARD, SGD = "forward", "backward", "sgd"
SGD_STAGE = "sgd"  # edges/worksheet/sgd.py's stage key
RANGE = ".."

# the worksheet's backward tables all sit in its one "Backward" section; by their key's kind, the stage of the
# app's backward that computes each (teach/stages/*.py). A kind not named here, or a stage this scenario's trace
# lacks, goes with the table before it.
BACKWARD_STAGE = {
    **dict.fromkeys(("target", "dO", "ce_logits", "ce_p", "ce_loss", "ce_dlogits", "dW_U"), "loss"),
    **dict.fromkeys(("dConcat", "dW_O", "db_O"), "dwo"),
    **dict.fromkeys(("dV", "dP"), "dmix"),
    **dict.fromkeys(("D", "dS"), "dsoftmax"),
    "dscores": "dscale",
    **dict.fromkeys(("dQu", "dKu"), "dscore"),
    **dict.fromkeys(("dW_Q", "db_Q", "dW_K", "dW_V", "db_K", "db_V", "kvdW_K", "kvdW_V", "kvdb_K", "kvdb_V"),
                    "dproject"),
    "dX_in": "dembed",
    **dict.fromkeys(("xroot", "xhat", "xm", "xgbar", "dX", "dgamma", "dbeta"), "dnorm"),
}  # and each variant's kinds (edges/faces/: sheet_back_stages)
ALIASES = {"drotate": ("dmla_rotate",)}  # [mla]'s dRotate has a key of its own


SAID = 40  # an error line repeats a typed --stages whole up to this many characters (stage names run long)


def said_text(text: str) -> str:
    """Typed text as an error line quotes it: repr (a control character shows as its escape), cut past SAID."""
    return repr(text) if len(text) <= SAID else f"{text[:SAID]!r}… ({len(text):,} characters)"


class SelectionError(ValueError):
    """A --stages or --heads that names no stage or head of the scenario; the message is one line."""


@dataclass(frozen=True)
class Selection:
    stages: frozenset[str] | None  # stage keys, "sgd" among them; None: every stage
    heads: tuple[int, ...] | None  # 0-based; None: every head
    said: str  # the rule line's words: "stages dSoftmax, dScore; head 1"
    named: frozenset[str] = frozenset()  # the stages named by themselves or in a range, not through a group

    @property
    def everything(self) -> bool:
        return self.stages is None and self.heads is None


EVERYTHING = Selection(None, None, "")


def choose(comp: Computation, stages: str | None, heads: Sequence[int] | None) -> Selection:
    """The selection ``--stages`` and ``--heads`` name (``heads`` as typed, 1-based); raises SelectionError."""
    if stages is None and heads is None:
        return EVERYTHING
    trace = Trace(comp)
    chosen_stages, named = (None, frozenset[str]()) if stages is None else _stages(trace, comp, stages)
    chosen_heads = None if heads is None else _heads(comp, heads)
    words = []
    if stages is not None:
        words.append(f"stages {_run(trace, comp, _in_order(trace, chosen_stages or ()))}")
    if chosen_heads is not None:
        names = [str(h + 1) + ("" if comp.heads[h].name == f"head {h + 1}" else f" ({comp.heads[h].name})")
                 for h in chosen_heads]
        words.append(f"{'head' if len(names) == 1 else 'heads'} {', '.join(names)}")
    return Selection(chosen_stages, chosen_heads, "; ".join(words), named)


def _run(trace: Trace, comp: Computation, keys: list[str]) -> str:
    """The stages' names for the rule line: a run of the stage bar's, four or more in its order, as its first and
    last (``Loss … SGD``, the backward group), so the line does not list every stage of a long bar."""
    order = [key for key, _ in _stage_list(trace, comp)]
    if len(keys) >= 4 and keys[0] in order and order[order.index(keys[0]):order.index(keys[0]) + len(keys)] == keys:
        return f"{_name(trace, keys[0])} … {_name(trace, keys[-1])}"
    return ", ".join(_name(trace, k) for k in keys)


def _stage_list(trace: Trace, comp: Computation) -> list[tuple[str, str]]:
    """(key, name) of every stage a sheet can ask about, in the stage bar's order, then the SGD step."""
    out = [(key, trace.stage(key).name) for key in trace.stage_keys]
    if comp.scenario.backward is not None:
        out.append((SGD_STAGE, _step_name(comp)))
    return out


def _step_name(comp: Computation) -> str:
    """The step's name: AdamW's where [backward] runs it (edges/worksheet/adamw.py), else SGD."""
    bw = comp.scenario.backward
    return "AdamW" if bw is not None and bw.adamw else "SGD"


def _name(trace: Trace, key: str) -> str:
    return _step_name(trace.comp) if key == SGD_STAGE else trace.stage(key).name


def _in_order(trace: Trace, keys: Iterable[str]) -> list[str]:
    order = {key: n for n, key in enumerate((*trace.stage_keys, SGD_STAGE))}
    return sorted(keys, key=lambda k: order.get(k, len(order)))


def _stages(trace: Trace, comp: Computation, text: str) -> tuple[frozenset[str], frozenset[str]]:
    """The stages ``text`` chooses, and those of them it names by themselves or in a range."""
    stages = _stage_list(trace, comp)
    backward = comp.scenario.backward is not None
    first_backward = next((n for n, (key, _) in enumerate(stages) if key == "loss"), len(stages))
    groups = {FORWARD: [key for key, _ in stages[:first_backward]],
              BACKWARD: [key for key, _ in stages[first_backward:]]}
    have = ", ".join(name for _, name in stages)
    known = f"this scenario's stages: {have}; or the groups forward{', backward' if backward else ''}"

    def one(word: str) -> int:
        for n, (_, name) in enumerate(stages):
            if name.casefold() == word.casefold():
                return n
        raise SelectionError(f"--stages {said_text(word)} is not a stage of this scenario; {known}")

    chosen: set[str] = set()
    named: set[str] = set()
    for part in text.split(","):
        word = part.strip()
        if not word:
            raise SelectionError(f"--stages {said_text(text)} names an empty stage; expected NAME,NAME ({known})")
        if word.casefold() in groups and (word.casefold() == FORWARD or backward):
            chosen.update(groups[word.casefold()])
        elif word.casefold() == BACKWARD:
            raise SelectionError(f"--stages backward: this scenario has no [backward] table, so no backward stages;"
                                 f" {known}")
        elif RANGE in word:
            start, _, stop = word.partition(RANGE)
            a, b = one(start.strip()), one(stop.strip())
            if a > b:
                raise SelectionError(f"--stages {said_text(word)}: {stages[a][1]} comes after {stages[b][1]} on the"
                                     f" stage bar; write the range first..last ({known})")
            named.update(key for key, _ in stages[a:b + 1])
        else:
            named.add(stages[one(word)][0])
    return frozenset(chosen | named), frozenset(named)


def _heads(comp: Computation, heads: Sequence[int]) -> tuple[int, ...]:
    count = len(comp.heads)
    have = "one head (--heads 1)" if count == 1 else f"heads 1 … {count}"
    seen: list[int] = []
    for head in heads:
        if not 1 <= head <= count:
            raise SelectionError(f"--heads {head} is out of range: a worksheet's --heads counts the heads from 1, as"
                                 f" --head and the status line's (1/{count}) do; this scenario has {have}")
        if head - 1 in seen:
            raise SelectionError(f"--heads lists head {head} twice; expected each head at most once ({have})")
        seen.append(head - 1)
    return tuple(sorted(seen))


@cache
def _backward_stages() -> dict[str, str]:
    """Every backward table kind's stage: the page's own, then each variant's."""
    return {**BACKWARD_STAGE, **{kind: stage for f in faces() for kinds, stage in f.sheet_back_stages for kind in kinds}}


def stage_of(tables: Sequence[Table], trace_keys: Sequence[str], own: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each table's stage as the stage bar names it: its own, or for a backward table the app's backward stage;
    ``own``: a part's table kinds with their stages (edges/worksheet/backward/parts.py), before the page's own."""
    present = set(trace_keys)
    out: dict[str, str] = {}
    last = next((key for key in trace_keys if key == "loss"), "loss")
    for table in tables:
        if table.stage != "backward":
            out[table.key] = table.stage
            continue
        kind = table.key.partition(".")[0]
        wanted = (own or {}).get(kind) or _backward_stages().get(kind)
        for key in (wanted, *ALIASES.get(wanted or "", ())):
            if key is not None and key in present:
                last = key
                break
        out[table.key] = last
    return out


def asked_and_shown(tables: Sequence[Table], selection: Selection, trace_keys: Sequence[str],
                    reads: dict[str, set[str]], own: Mapping[str, str] | None = None,
                    untrained: Container[str] = ()) -> tuple[set[str], set[str], list[str]]:
    """The keys of the tables the sheet asks about, of every table it prints (those and what they read), and of the
    gradients of weights not trained that it would have asked but leaves out, in page order.
    ``reads``: for each computed table, the keys of the tables its answer-key lines read; ``own`` as for stage_of;
    ``untrained``: the keys of the gradients of weights the scenario does not train (edges/worksheet/sgd.py)."""
    if selection.everything:
        keys = {t.key for t in tables}
        return {t.key for t in tables if not t.given}, keys, []
    stage = stage_of(tables, trace_keys, own)
    by_key = {t.key: t for t in tables}
    heads = selection.heads

    def left_out_head(key: str) -> bool:
        table = by_key.get(key)
        return bool(heads is not None and table is not None and table.head is not None and table.head not in heads
                     and not set(table.readers) & set(heads))

    asked: set[str] = set()
    for t in tables:
        if t.given or not t.blankable or (selection.stages is not None and stage[t.key] not in selection.stages):
            continue
        if heads is not None:
            if t.head is not None and t.head not in heads and not set(t.readers) & set(heads):
                continue
            if t.head is None and any(left_out_head(k) for k in reads.get(t.key, ())):
                continue
        asked.add(t.key)
    idle: set[str] = set()
    if selection.stages is not None:  # a gradient nothing moves: asked where its stage is named, or a line reads it
        idle = {k for k in asked if k in untrained and stage[k] not in selection.named}
        idle -= {k for k in idle if any(k in reads.get(other, ()) for other in asked - idle)}
        asked -= idle
    shown = set(asked)
    for key in asked:
        shown |= {k for k in reads.get(key, ()) if k in by_key}
    return asked, shown, [t.key for t in tables if t.key in idle]
