"""``[linear]``: linear attention (Katharopoulos et al. 2020) in place of every head's softmax
(docs/scenario-format.md, "[linear]").

φ(Q)φ(K)ᵀ, masked causally and each row divided by its sum, times V: the same numbers as the running
state S_t = S_{t−1} + φ(k_t)v_tᵀ, z_t = z_{t−1} + φ(k_t), o_t = φ(q_t)ᵀS_t / φ(q_t)ᵀz_t.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from qkv_tui.base.values import kind as _kind
from qkv_tui.core.toml_text import string
from qkv_tui.core.variants import linear_table
from qkv_tui.core.variants.common import Context, Table, choice
from qkv_tui.core.variants.linear_table import LINEAR_KEYS as LINEAR_KEYS
from qkv_tui.core.variants.refusals import replaces_softmax

FEATURE_KINDS = ("elu1", "relu", "identity")
FEATURE_TEXT = {"elu1": "elu(x) + 1", "relu": "max(x, 0)", "identity": "x"}


@dataclass(frozen=True)
class Linear:
    """Linear attention's feature map φ and whether each row is divided by φ(q_t)ᵀz_t."""

    not_plain: ClassVar[str] = "[linear]"  # what makes the attention other than plain (core/diagnose.py)
    state: ClassVar[bool] = True  # a running state in place of every head's softmax (core/part_questions.py)
    cache_kind: ClassVar[str] = "linear"  # what the cost view calls its layer's cache (core/cost.py)
    two_forms: ClassVar[str] = ("Quadratic and Recurrent are the same outputs two ways; a model runs one (at decode,"
                                " the recurrent); the totals count both.")  # display/cost_view.py

    feature: str  # "elu1" | "relu" | "identity"
    normalize: bool

    lead: ClassVar[tuple[str, str]] = ("Linear attention", "")  # what a page says it works (part_questions.lead)

    # what the closing summary and the heads view call a row of the weights where they are no distribution
    # (core/part_questions.scenario_says): φ(q)·φ(k) not divided weighs V as it is
    @property
    def looks_heading(self) -> str | None:
        return None if self.normalize else "Whose V each token weighs most"

    @property
    def weights_note(self) -> str | None:
        return None if self.normalize else " (φ(q)·φ(k), not divided by the row's sum; not a distribution)"


def parse_linear(table: dict[str, Any], ctx: Context) -> Linear:
    v = ctx.v
    replaces_softmax(v, ctx, "linear")
    raw = table.get("feature", "elu1")
    if isinstance(raw, str) and raw.startswith("elu") and raw != "elu1":  # difflib would offer 'relu' for 'elu'
        raise v.fail(f"[linear] feature = {raw!r} is not allowed; expected one of: {', '.join(map(repr, FEATURE_KINDS))};"
                     " did you mean 'elu1'? (φ(x) = elu(x) + 1)")
    feature = choice(v, raw, "[linear] feature", FEATURE_KINDS)
    normalize = table.get("normalize", True)
    if not isinstance(normalize, bool):
        raise v.fail(f"[linear] normalize must be true or false, got {_kind(normalize)}")
    if feature == "identity" and normalize:
        raise v.fail("[linear] feature = \"identity\" needs normalize = false (with φ(x) = x a row's sum φ(q)ᵀz may be 0"
                     " or negative, so it is no share); expected normalize = false, or feature = \"elu1\" or \"relu\"")
    return Linear(feature, normalize)


def write_linear(lin: Linear) -> list[str]:
    return ["[linear]", f"feature = {string(lin.feature)}", f"normalize = {'true' if lin.normalize else 'false'}"]


def _summary(lin: Linear) -> str:
    return f"linear attention (φ = {FEATURE_TEXT[lin.feature]}{'' if lin.normalize else ', not normalised'})"


# registered in linear_table.py, whose functions are this module's (a scenario without the table loads only that)
TABLE: Table[Linear] = linear_table.TABLE
