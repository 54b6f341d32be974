"""ALiBi as a part of a head's pass ([alibi], Press et al.): a per-head bias slope·(pos_j − pos_i) added to the
scaled scores before the mask (core/variants/alibi.py holds the keys, core/alibi_part.py builds the spec)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from qkv_tui.kernels.attention import Attended, HeadPass, PartSpec
from qkv_tui.kernels.softmax import Index
from qkv_tui.kernels.stats import Matrix


def alibi_bias(slope: float, positions: tuple[int, ...]) -> Matrix:
    """slope · (pos_j − pos_i): 0 on the diagonal, more negative the further back the key: (n, n)."""
    p = np.asarray(positions, dtype=np.float64)
    bias: Matrix = slope * (p[None, :] - p[:, None])  # (n, n)
    return bias


@dataclass(frozen=True, eq=False)
class Biased:
    """ALiBi's record of one head ([alibi]); it answers the views' questions of a term added to the scores
    (core/part_questions.py)."""

    bias: Matrix  # (n, m) slope·(pos_j − pos_i), as kept
    slope: float  # the head's slope

    term_name: ClassVar[str] = "bias"  # what the views call the term in a line of the scores
    # the module that writes the term's lines in the Scale stage (core/part_questions.face; teach/stages/scale.py)
    faces: ClassVar[Mapping[str, str]] = MappingProxyType({"scale": "qkv_tui.teach.stages.alibi_lines"})

    def scores_term(self, rows: Index, cols: Index) -> Matrix:
        """What this part adds to the scaled (stepped) scores of ``rows`` and ``cols``."""
        out: Matrix = self.bias[rows, cols]
        return out

    def softmax_options(self, rows: Index, cols: Index) -> dict[str, object]:
        """What kernels/attention.py's attend takes to replay this part on ``rows`` and ``cols``."""
        return {"bias": self.bias[rows, cols]}

    def overflow(self, stage: str, at: Any) -> tuple[str, str, str] | None:
        """The term past float64 (core/part_questions.py): its slope."""
        if stage != "term":
            return None
        said: tuple[str, str, str] | None = at.named((
            ("bias", self.bias, False, True, "expected a smaller ALiBi slope (the bias is slope·(j − i))"),))
        return said


@dataclass(frozen=True, eq=False)
class AlibiSpec(PartSpec):
    """ALiBi as a part: its bias (n, m) is added to the scaled scores."""

    bias: Matrix
    slope: float

    def before_score(self, p: HeadPass) -> None:
        p.bias = self.bias

    def after_mix(self, p: HeadPass, attended: Attended) -> None:
        assert attended.bias is not None
        p.records.append(Biased(attended.bias, self.slope))
