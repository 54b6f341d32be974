"""QK-norm in the exports ([qk_norm]): each head's Q and K after the norm and the gains' gradients in the JSON; its
rule on a worksheet's backward."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qkv_tui.core.head import HeadResult
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants import qk_norm
from qkv_tui.edges.export_grad import WriteFields, vector
from qkv_tui.edges.faces import At, ExportFace, Fields
from qkv_tui.kernels.qk_norm import QKNormed

if TYPE_CHECKING:  # the exports' gradients are read only where a scenario has [backward]
    from qkv_tui.core.gradients import Gradients


def head(h: HeadResult) -> Fields:
    return [("Q_norm", h.read(QKNormed, lambda q: q.Q_norm)), ("K_norm", h.read(QKNormed, lambda q: q.K_norm))]


def grad(sc: Scenario, g: Gradients, write_fields: WriteFields) -> Fields:
    """QK-norm's gains as the file gives them: each head's entry holds its own share, and a gain the heads share
    (over = "head") moves by their sum, as kv_heads sums shared K/V weights; side by side for "all"."""
    if sc.qk_norm is None:
        return [("dgamma_q", None), ("dgamma_k", None)]
    return [("dgamma_q", vector(g.dgamma_q)), ("dgamma_k", vector(g.dgamma_k))]


def sheet_back_rules(sc: Scenario) -> list[str]:
    qk = sc.qk_norm
    if qk is None:
        return []
    if qk.over == "all":
        return ["  QK-norm over every head's columns, after every head's part: r = √(ms + eps) per row, x̂ = [every"
                " head's q] / r, m = mean(dq̂ ⊙ γ ⊙ x̂) over the whole row; dq = (dq̂ ⊙ γ − x̂·m) / r, dγ = Σ rows"
                " of dq̂ ⊙ x̂. Each head's dK is the sum of every head's share c_K: the same, from that head's dk̂"
                " alone (0 in the other heads' columns)."]
    return ["  QK-norm: r = √(ms + eps), x̂ = q / r, m = mean(dq̂ ⊙ γ ⊙ x̂); dq = (dq̂ ⊙ γ − x̂·m) / r,"
            " dγ = Σ rows of dq̂ ⊙ x̂."]


def sheet_printed(chain: Any, h: int, hr: HeadResult, weights: Any) -> tuple[list[object], dict[str, object]]:
    if chain.sc.qk_norm is None:
        return [], {}
    from qkv_tui.edges.worksheet.backward.qk_norm import printed

    return [printed(chain, h)], {}


def _has_roots(sc: Scenario) -> bool:
    return sc.qk_norm is not None


def _roots(sc: Scenario, pcomp: Any) -> list[Any]:
    from qkv_tui.edges.worksheet.backward.qk_norm import roots

    return list(roots(sc, pcomp))


def sheet_back_normed(t: Any, chain: Any, pcomp: Any, h: int, mine: bool, hg: Any) -> None:
    if chain.sc.qk_norm is None:
        return
    from qkv_tui.edges.worksheet.backward.qk_norm import head_tables

    head_tables(t, chain, pcomp, h, mine, hg)


def sheet_back_sums(t: Any, chain: Any, G: Any) -> None:
    from qkv_tui.edges.worksheet.backward.qk_norm import sums

    sums(t, chain, G)


def sheet_scored(sc: Scenario) -> tuple[str, str, str] | None:
    """Q̂ and K̂, the normed tables (Q_norm.h), and dQ read back through the norm (dQ.h)."""
    return None if sc.qk_norm is None else ("̂", "{role}_norm", "d{r}")


def sheet_back_line(cells: Any, table: Any, i: int, j: int, answer: str, ops: Any) -> str | None:
    if cells.sc.qk_norm is None:
        return None
    from qkv_tui.edges.worksheet.backward.qk_norm import line

    return line(cells, table, i, j, answer, ops)


FACE = ExportFace(qk_norm.TABLE, head=head, head_at=At(after="b_V"), grad=grad, sheet_back_rules=sheet_back_rules,
                  sheet_scored=sheet_scored, sheet_back_line=sheet_back_line,
                  sheet_back_stages=(((
                      "qroot", "qhat", "qm", "dQ", "dgamma_q", "kroot", "khat", "km", "dK", "dgamma_k",
                      "aqroot", "aqhat", "aqm", "akroot", "akhat", "akm", "akc"), "dqk_norm"),),
                  sheet_printed=sheet_printed, sheet_roots=(_has_roots, _roots), sheet_back_normed=sheet_back_normed,
                  sheet_back_sums=sheet_back_sums)
