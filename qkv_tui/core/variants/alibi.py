"""``[alibi]``: a per-head linear bias slope·(j − i) on the scaled scores (docs/scenario-format.md)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from qkv_tui.core.toml_text import vector
from qkv_tui.core.variants import alibi_table
from qkv_tui.core.variants.alibi_table import ALIBI_KEYS as ALIBI_KEYS
from qkv_tui.core.variants.common import Checker, Context, Table, numbers

if TYPE_CHECKING:
    import numpy.typing as npt



@dataclass(frozen=True)
class Alibi:
    """ALiBi: a per-head linear bias slope·(j − i) added to the scaled scores."""

    slopes: tuple[float, ...]  # one per query head
    default: bool  # True when the slopes are the ALiBi paper's default (default_slopes)

    not_plain: ClassVar[str] = "[alibi]"  # what makes the attention other than plain (core/diagnose.py)
    # where position enters, as the Embed stage says it (core/part_questions.scenario_says)
    position_enters: ClassVar[str] = " Here position enters at the Scale stage, as ALiBi's distance bias on the scores."
    # what the table changes of a head's pass and how, in a word: a table that replaces the softmax refuses every
    # table that acts on its logits ("[linear] replaces the softmax, whose logits [alibi] biases")
    acts_on: ClassVar[str] = "logits"
    does: ClassVar[str] = "biases"

    def refuses_mask(self, allow: npt.NDArray[np.bool_], positions: Sequence[int] | None) -> str | None:
        """Why an edited mask ``allow`` cannot stand beside the table (core/cell_edit.py puts the query's label
        before it); None where it can."""
        if positions is None or alibi_later_key(allow, positions) is None:
            return None
        return ("would attend a later key, where ALiBi's bias is a bonus, not a penalty; with [alibi] a query may"
                " attend only keys at or before it (docs/scenario-format.md)")


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


def parse_alibi(table: dict[str, Any], ctx: Context) -> Alibi:
    """Parsed after [rope], whose positions decide which keys count as later."""
    v, heads = ctx.v, len(ctx.heads)
    if ctx.is_cross:
        raise v.fail(
            "[alibi] needs self-attention (the bias uses the distance j − i between tokens); remove [context] or [alibi]"
        )
    if "slopes" in table:
        slopes = numbers(v, table["slopes"], "[alibi] slopes", heads, "one slope per head")
        alibi = Alibi(tuple(float(s) for s in slopes), False)
    else:
        alibi = Alibi(default_slopes(heads), True)
    # the positions a table parsed before gives the tokens ([rope]'s), else 0 … n−1
    given = [found for t in ctx.earlier.values() if (found := getattr(t, "positions", None)) is not None]
    positions = given[0] if given else tuple(range(len(ctx.tokens)))
    alibi_mask(v, ctx.mask_kind, ctx.allow, ctx.tokens, positions)
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


def write_alibi(alibi: Alibi) -> list[str]:
    """The paper's default slopes stay unwritten, so the file still says "the default" and not numbers."""
    return ["[alibi]"] if alibi.default else ["[alibi]", f"slopes = {vector(alibi.slopes)}"]


# registered in alibi_table.py, whose functions are this module's (a scenario without the table loads only that)
TABLE: Table[Alibi] = alibi_table.TABLE
