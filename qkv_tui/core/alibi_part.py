"""[alibi] as a part of a head's pass: each head's bias slope·(pos_j − pos_i) on the scaled scores (kernels/alibi.py),
built for core/head_parts.py's HEAD_PARTS. Apart from the table's keys (core/variants/alibi.py) because the loader
imports those and the builders import the loader."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qkv_tui.core.arrays import Matrix
from qkv_tui.core.variants.alibi import TABLE
from qkv_tui.kernels.alibi import AlibiSpec, Biased, alibi_bias
from qkv_tui.kernels.attention import frozen


def alibi_of(run: Any, h: int) -> Matrix:
    """Head h's ALiBi bias (n, n): slope·(pos_j − pos_i), or, worked again by hand, its exact head's."""
    if run.exact is not None:
        exact = run.exact[h].part(Biased)
        assert exact is not None
        kept: Matrix = exact.bias
        return kept
    sc = run.sc
    alibi = TABLE.of(sc)
    assert alibi is not None and sc.positions is not None
    return frozen(alibi_bias(alibi.slopes[h], sc.positions))


def alibi_part(run: Any) -> Callable[[int], AlibiSpec] | None:
    """Each head's spec where the scenario has [alibi] (``run`` is head_parts' Run, not imported: it imports this
    module)."""
    alibi = TABLE.of(run.sc)
    return None if alibi is None else lambda h: AlibiSpec(alibi_of(run, h), alibi.slopes[h])
