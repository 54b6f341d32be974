"""The combinations a table refuses, by what the tables parsed before it are rather than by their names.

A table's value says what it is by a class attribute: ``state`` (a running state in place of every head's
softmax: [linear], [deltanet]), ``builds_heads`` (the heads built from a latent: [mla]), ``acts_on`` (what of a
head's pass it changes: ``"logits"`` for [alibi]'s bias, ``"queries and keys"`` for [qk_norm] and [rope]; with
``does``, the verb a message says it with), ``whole_head`` (its step reads a head's whole d_k at once: [qk_norm]).
A key of a head (the loader's Head) says what it is by its field's metadata: ``softmax`` (the words for a part
of the softmax, which a table that replaces it refuses), ``joins_sum`` (a column that joins each row's sum),
``after_mix`` (a step on the head's output after the mix).
A refusing table lists what it refuses, each with the line that says why, written with the refused table's own
header (``[{key}]``); so a new table with the same property is refused too, and no table module names another.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import fields, is_dataclass

from qkv_tui.base.fixed import fixed
from qkv_tui.core.variants.common import Checker, Context


@fixed
class Having:
    """Every table parsed before whose value answers ``question`` with ``answer``."""

    question: str
    answer: object = True

    def holds(self, value: object) -> bool:
        return getattr(value, self.question, None) == self.answer


Refused = Sequence[tuple[str | Having, str]]  # (a table's key, or a property of its value; why, with {key})


def refused(ctx: Context, refuses: Refused) -> tuple[str, str] | None:
    """The first entry of ``refuses`` the scenario has, in the refusing table's order: (the refused table's key,
    the line that says why with ``{key}`` and ``{table}``, its value, written in); None where it has none. Among
    the tables with one property, the first parsed."""
    for which, why in refuses:
        for key, value in ctx.earlier.items():
            if value is not None and (key == which if isinstance(which, str) else which.holds(value)):
                return key, why.format(key=key, table=value)
    return None


def head_keys(head: object, role: str) -> Iterator[tuple[str, str]]:
    """Each key a head (the loader's Head) has whose field's metadata names ``role``: (the key, its words)."""
    if not is_dataclass(head):  # a parser called on its own (tests) may be given other heads
        return
    for f in fields(head):
        words = f.metadata.get(role)
        if words is not None and getattr(head, f.name, None) is not None:
            yield f.name, str(words)


STATE = Having("state")  # a running state in place of every head's softmax
BUILDS_HEADS = Having("builds_heads")  # the heads built from a latent, not [[heads]] or [attention]
ON_LOGITS = Having("acts_on", "logits")  # a change to the softmax's logits (a bias on the scaled scores)
ON_QK = Having("acts_on", "queries and keys")  # a step on Q and K before the scores (a norm, a rotation)
WHOLE_HEAD = Having("whole_head")  # a step that reads a head's whole d_k at once (a norm's statistics)


def last_of(ctx: Context, having: Having) -> str | None:
    """The key of the last table parsed with the property (of the steps on Q and K, the one nearest the scores:
    RoPE turns what QK-norm normalised); None where none has it."""
    found = [key for key, value in ctx.earlier.items() if value is not None and having.holds(value)]
    return found[-1] if found else None


def replaces_softmax(v: Checker, ctx: Context, table: str) -> None:
    """The readings pinned for a table that replaces every head's softmax with a running state: a causal
    mask, self-attention, one K/V head per query head, and none of the softmax's own keys; and heads of
    [[heads]] or [attention], not a table's that builds its own."""
    found = refused(ctx, ((BUILDS_HEADS, f"[{{key}}] and [{table}] are both given; [{table}] replaces the softmax of"
                                         f" [[heads]] or [attention] (expected one of [{{key}}] or [{table}])"),))
    if found is not None:
        raise v.fail(found[1])
    if ctx.is_cross:
        raise v.fail(f"[{table}] needs self-attention (its state runs over the tokens themselves); remove [context] or [{table}]")
    if ctx.mask_kind != "causal":
        raise v.fail(f"[{table}] needs mask = \"causal\" (the state reads each token after the ones before it),"
                     f" but mask = {ctx.mask_kind!r}; expected mask = \"causal\"")
    if ctx.num_kv_heads is not None:
        raise v.fail(f"[{table}] does not share K/V heads (each head keeps its own state), but [attention] has"
                     f" num_kv_heads = {ctx.num_kv_heads}; expected no num_kv_heads")
    for i, head in enumerate(ctx.head_tables):
        name = ctx.heads[i][0]
        kv = getattr(head, "kv_head", None)
        if kv is not None and kv != i:
            raise v.fail(f"[{table}] does not share K/V heads (each head keeps its own state), but {name} reads"
                         f" kv_head = {kv + 1}; expected no kv_head")
        for key, why in head_keys(head, "softmax"):
            raise v.fail(f"[{table}] replaces the softmax, which {why} belongs to, but {name} has {key};"
                         f" expected no {key} with [{table}]")
    found = refused(ctx, ((ON_LOGITS, "[{key}] {table.does}"),))
    if found is not None:
        raise v.fail(f"[{table}] replaces the softmax, whose logits {found[1]}; expected [{found[0]}] or [{table}], not both")
