"""What a view asks the parts of a head (contracts §14, issue 30): generic questions, each answered by the part's
own record where its variant changes the answer, so no view tests for a variant by name.

A record answers by an attribute, each optional (a record without it has nothing to say there):

- ``refuses``: a view's name ("tiles", "cache") to the line that says why it cannot show the head;
- ``row_total``: what each row of the head's map adds up to, where not 1;
- ``scores_step(scaled)``: its step on the scaled scores before any term (the soft-cap), with ``written``,
  ``symbol`` and ``stepped_name`` to write it, and ``step_factor``/``back_step``/``gathered`` for the backward;
- ``scores_term(rows, cols)``: what it adds to the (stepped) scores (ALiBi's bias), named ``term_name``;
- ``beside``: the logit of a column beside the map with no Value (a sink), and ``beside_share(row_sum)``;
- ``softmax_options(rows, cols)``: what kernels/attention.py's ``attend`` takes to replay it on a window;
- ``scored_suffix``/``scored_word``: the names of the Queries and Keys as scored, where it turns them;
- ``again(X, output)``: its record for some query rows alone, where it acts on each row after the map (the
  gate), with ``factor`` (what each cell of the output is multiplied by) and ``joined``;
- ``checked()``: a promise of its numbers, re-checked, for the closing summary;
- ``faces``: a view's name to the display module that shows what the view shows of it otherwise;
- ``words``: a place in a view ("tiles.start", "cache.softmax", ...) to a template of what it says there,
  formatted with the record as ``part`` and the place's own fields;
- ``x_path(head_grads)``: its path into the X the projections read, for dEmbed: (role, what the line calls its
  gradient, the gradient at X̂·W_role, W_role), or None;
- ``overflow(stage, at)``: the overflow rule's question (core/engine.py ``check_head``): at ``stage`` of the
  head's computation ("latent" before Q, K and V; "turned" after them; "state" in place of the weights;
  "stepped" and "term" on the scaled scores; "after" the map), the first of its own matrices past float64 as
  (its name, the line that says where, ``at.first``, and what to change), or None.

A scenario's table (``tables``) answers by an attribute too, each optional:

- ``looks_heading``, ``weights_note``: what the summary and the heads view call a row of the weights
  (``scenario_says``);
- ``overflow_hint(name)``: what to change where the shared matrix ``name`` (Q, K, V, the scores) overflows, when
  the table makes it of other inputs; ``overflow_cause(name)``: a cause of its own to name first;
- ``overflow_inputs(X_in, at)``: (line, hint) where what it computes from the normalised X for every head at once
  is past float64, or None;
- ``scores_with_decimals``: True where the table turns what is scored by numbers that are never whole (a
  rotation's cos and sin), so the scores are written with decimals (``scenario_has``);
- ``state``: True where the table puts a running state in place of every head's softmax (``scenario_has``);
- ``position_enters``: where the table brings position in, as the Embed stage says it (``scenario_says``);
- ``residual_adds``: what each earlier layer of its model added to the residual stream, where that is not an
  attention output and an MLP output (a Mamba-2 block's mixer; ``scenario_says``);
- ``embed_back``: the stage module that says what dEmbed computes where its own projections read X in the Q, K
  and V projections' place (``scenario_says``);
- ``x_paths(grads)``: the paths into X̂ of what it computes from X̂ for every head at once, as ``x_path``;
- ``not_plain``: the words that say the table makes the attention other than plain (core/diagnose.py: the
  mistakes are tried on plain attention).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import fields, is_dataclass
from typing import Any

from qkv_tui.core.head import HeadResult
from qkv_tui.core.scenario import Matrix, Scenario

Index = int | slice  # a row or a column, or a range of them, of a head's (n, m) map


def refusal(heads: Iterable[HeadResult], view: str) -> str | None:
    """The first line in which a part of one of ``heads`` refuses ``view``; None where every part can be shown."""
    for hr in heads:
        for record in hr.parts.values():
            said: Mapping[str, str] = getattr(record, "refuses", {})
            if view in said:
                return said[view]
    return None


def row_total(hr: HeadResult) -> float:
    """What each row of a head's map adds up to, as its parts say (differential attention: 1 − λ); 1 where no part
    changes it (a sink's share aside, which the softmax keeps in ``row_sum``)."""
    for record in hr.parts.values():
        total = getattr(record, "row_total", None)
        if total is not None:
            return float(total)
    return 1.0


def answering(hr: HeadResult, name: str) -> Iterator[Any]:
    """Each of the head's part records that answers ``name``, in the order the parts ran."""
    return (record for record in hr.parts.values() if getattr(record, name, None) is not None)


def _first(hr: HeadResult, name: str) -> Any:
    return next(answering(hr, name), None)


def stepper(hr: HeadResult) -> Any:
    """The part whose step the scaled scores take before any term (the soft-cap's record); None without one.
    One part steps them today: a second would chain its backward after this one's."""
    return _first(hr, "scores_step")


def step(hr: HeadResult) -> Callable[[Matrix], Matrix]:
    """The scaled scores as the parts' steps leave them, in the parts' order; the scores themselves without one."""
    steps = [record.scores_step for record in answering(hr, "scores_step")]

    def stepped(scaled: Matrix) -> Matrix:
        for one in steps:
            scaled = one(scaled)
        return scaled
    return stepped


def term(hr: HeadResult, rows: Index = slice(None), cols: Index = slice(None)) -> Matrix | None:
    """What the parts add to the stepped scores at ``rows`` and ``cols`` (ALiBi's bias); None where none adds."""
    total: Matrix | None = None
    for record in answering(hr, "scores_term"):
        add = record.scores_term(rows, cols)
        total = add if total is None else total + add
    return total


def term_name(hr: HeadResult) -> str | None:
    """What a line of the scores calls the term (``bias``); None where no part adds one."""
    record = _first(hr, "scores_term")
    return None if record is None else str(record.term_name)


def logits(hr: HeadResult, scaled: Matrix, rows: Index = slice(None), cols: Index = slice(None)) -> Matrix:
    """The softmax's input before the mask from the scaled scores of ``rows`` and ``cols``: stepped, plus the term."""
    stepped = step(hr)(scaled)
    added = term(hr, rows, cols)
    return stepped if added is None else stepped + added


def beside(hr: HeadResult) -> float | None:
    """The logit of a column beside the head's map that has no Value and joins each row's sum (a sink); None
    without one."""
    record = _first(hr, "beside")
    return None if record is None else float(record.beside)


def beside_share(hr: HeadResult) -> Matrix | None:
    """(n,) the share of each row the column beside the map takes; None without one."""
    record = _first(hr, "beside")
    return None if record is None else record.beside_share(hr.row_sum)


def softmax_options(hr: HeadResult, rows: Index = slice(None), cols: Index = slice(None)) -> dict[str, object]:
    """What kernels/attention.py's ``attend`` takes, besides the numbers every head has, to replay the head's
    softmax on ``rows`` and ``cols`` (a window of its map) as its parts ran it."""
    out: dict[str, object] = {}
    for record in answering(hr, "softmax_options"):
        out.update(record.softmax_options(rows, cols))
    return out


def scored_suffix(hr: HeadResult) -> str:
    """``_rot``, ``_norm`` or nothing: the views' suffix to Q and K as scored, from the last part that turns them."""
    names = [str(record.scored_suffix) for record in answering(hr, "scored_suffix")]
    return names[-1] if names else ""


def scored_word(hr: HeadResult) -> str | None:
    """``rotated``, ``normalised``: what the last part that turns the Keys did to them; None where none did."""
    words = [str(record.scored_word) for record in answering(hr, "scored_word")]
    return words[-1] if words else None


def again(hr: HeadResult, X: Matrix, output: Matrix) -> tuple[Any, ...]:
    """The records of the parts that act on each query row after the map (the gate), for some rows alone: from
    what those rows' Query projection reads and their output."""
    return tuple(record.again(X, output) for record in answering(hr, "again"))


def checked(hr: HeadResult) -> list[str]:
    """What the parts promise of their numbers, each re-checked (the soft-cap: every capped score within ±c)."""
    return [str(record.checked()) for record in answering(hr, "checked")]


def face(heads: Iterable[HeadResult], view: str) -> str | None:
    """The display module that shows what ``view`` shows of a part of ``heads`` otherwise (the latent cache);
    None where no part has one."""
    for hr in heads:
        for record in hr.parts.values():
            faces: Mapping[str, str] = getattr(record, "faces", {})
            if view in faces:
                return faces[view]
    return None


def said(hr: HeadResult, place: str, **given: object) -> list[str]:
    """What the head's parts say at ``place`` in a view, each template formatted with the record as ``part`` and
    the place's ``given`` fields; nothing where no part speaks there."""
    return [record.words[place].format(part=record, **given) for record in answering(hr, "words")
            if place in record.words]


def said_of(record: object, place: str, **given: object) -> str | None:
    """What one record says at ``place`` (a record a view holds on its own, as a decode step's gate)."""
    words: Mapping[str, str] = getattr(record, "words", {})
    return words[place].format(part=record, **given) if place in words else None


def tables(sc: Scenario) -> Iterator[object]:
    """What a scenario holds: each field's value, and each value of a mapping of them (the parts by their key)."""
    assert is_dataclass(sc)
    for f in fields(sc):
        value = getattr(sc, f.name)
        if isinstance(value, Mapping):
            yield from value.values()
        else:
            yield value


def scenario_answer(sc: Scenario, name: str) -> Any:
    """The first answer to ``name`` among the scenario's variant tables, of any kind; None where none answers."""
    for table in tables(sc):
        answer = getattr(table, name, None)
        if answer is not None and not callable(answer):
            return answer
    return None


def lead(sc: Scenario) -> tuple[str, str]:
    """What a page says it works, (words, formula): the scenario's tables say where its heads are not scaled
    dot-product attention ([linear], the delta rule, [ssd], [differential], a sparse selection)."""
    said = scenario_answer(sc, "lead")
    if isinstance(said, tuple):
        return said[0], own_divisor(said[1], None if sc.scale is None else f"{sc.scale:g}")
    # the file's own divisor where it sets one (Gemma 3n's 1): the page's stages divide by it, not by √dₖ
    divisor = "√dₖ" if sc.scale is None else f"{sc.scale:g}"
    return ("Scaled dot-product attention, ", f"softmax(QKᵀ/{divisor})V")


def map_formula(heads: Iterable[HeadResult]) -> tuple[tuple[str, bool], ...] | None:
    """What a head's map holds, as the heads view writes it ((text, on the map's colour) pieces), where a part's
    record says (an [ssd] head's L ∘ C·Bᵀ, a differential head's two maps); None where no part does."""
    heads = list(heads)
    for hr in heads:
        for record in hr.parts.values():
            said = getattr(record, "map_formula", None)
            if said is not None:
                by = set_divisor(heads)
                return tuple((own_divisor(text, by), on) for text, on in said)
    return None


def set_divisor(heads: Iterable[HeadResult]) -> str | None:
    """The number every one of these heads divides its scores by, as a formula writes it, where the scenario sets
    it for all of them; None where one keeps its default (√dₖ) or they differ (each formula then says its own)."""
    heads = list(heads)
    scales = {hr.scale for hr in heads}
    if heads and len(scales) == 1 and not any(hr.scale_is_default for hr in heads):
        return f"{scales.pop():g}"
    return None


def own_divisor(formula: str, by: str | None) -> str:
    """A part's formula with the file's divisor ``by`` (None: none set) where the part writes its default, √d:
    [differential]'s maps divide by the file's scale where it sets one, as its stages say."""
    return formula if by is None else formula.replace("/√d)", f"/{by})")


def scenario_has(sc: Scenario, name: str) -> bool:
    """Whether one of the scenario's variants answers ``name`` with True (a state in place of the softmax, say)."""
    return any(getattr(table, name, None) is True for table in tables(sc))


def scenario_says(sc: Scenario, name: str) -> str | None:
    """The first answer to ``name`` among the scenario's variants (its [linear] or [deltanet] table, say)."""
    for table in tables(sc):
        answer = getattr(table, name, None)
        if isinstance(answer, str):
            return answer
    return None


# reach_refuse: the Queries and Keys as they enter the scores, for a part that scores them itself


def score_width(sc: Scenario, d_k: int) -> int:
    """How many of a head's d_k columns of Q and K one score reads: d_k, or where a table scores each head in
    blocks (``score_width``: differential attention's two halves), the block's; a step on Q and K acts on each
    block as on a head of that width."""
    width = scenario_answer(sc, "score_width")
    return d_k if width is None else int(width)


def turn(sc: Scenario, width: int, policy: Any) -> Any:
    """How the scenario's tables turn Queries and Keys by position (``turn_at``: a rotation's cos and sin at each
    token's position, kernels/attention.py Turn) for a head or block ``width`` wide; None where none turns them."""
    for table in tables(sc):
        at = getattr(table, "turn_at", None)
        if callable(at):
            return at(sc.positions, width, policy)
    return None
