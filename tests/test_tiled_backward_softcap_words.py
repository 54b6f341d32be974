"""The tiles view of the backward pass under a soft-cap (display/tiled_back_view.py) names what its numbers are:
dQ and dK gather dscaled = dS ⊙ (1 − tanh²(s/c)), not dS, so its lines, its meanings, its formula bar and its
check say dscaled there (they said dQ = dS·K/scale while the weights shown were dscaled's). Without a cap the
words stay dS. The dQ and dK lines are recomputed here from the quantity they name."""

from __future__ import annotations

import re

import numpy as np

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import builtin_dir, parse_scenario
from qkv_tui.display.tiled_back_view import back_explanation
from qkv_tui.kernels.softcap import Capped
from qkv_tui.teach.tiled import tiled
from qkv_tui.teach.tiled_backward import TiledBackward, tiled_backward

# softcap.toml's two heads (caps 5 and 50) with a dO, so the backward runs
CAPPED = (builtin_dir() / "softcap.toml").read_text(encoding="utf-8") + """
[backward]
dO = [[1, 0, -1, 0.5, 0], [0, 1, 0, 0, -1], [0.5, 0, 0, 1, 0]]
"""
UNCAPPED = CAPPED.replace("softcap = 5.0 ", "# ").replace("softcap = 50.0 ", "# ")

# dQ[I] = dQ + dscaled·K[I..AI]/√2 = [0, 0] + (0.1·[1, 0] + …)/√2 = [..]
ACCUMULATE = re.compile(r"^(dQ|dK)\[(.+?)\] = \1 \+ (dscaled|dS)(ᵀ?)·[QK]\[.+?\]/\S+ = \S.*? \+ \((.*)\)/\S+ = ")
WEIGHT = re.compile(r"\(?(-?[\d.]+(?:e[+-]\d+)?)\)?·\[")


def _ops(tb: TiledBackward) -> list[tuple[str, str, str, str]]:
    """(phase, arithmetic, meaning, formula bar) of every backward operation."""
    out = []
    for k in range(len(tb)):
        ex = back_explanation(tb, k, 0, 6)
        out.append((tb.op(k).phase, ex.arithmetic, ex.meaning, "".join(text for text, _ in ex.formula)))
    return out


def _named_weights(tb: TiledBackward, k: int, name: str, row: str) -> np.ndarray:
    """The weights the line's named quantity gives its row (dQ) or column (dK), masked cells left out."""
    op = tb.op(k)
    assert op.ktile is not None and op.qblock is not None
    pr = tb.pair(op.ktile, op.qblock)
    cap = tb.th.comp.heads[tb.head].read(Capped, lambda c: c.softcap)
    assert name == "dS" or cap is not None
    ds = pr.dS if name == "dS" else pr.dS * (1 - np.tanh(pr.scaled / (cap or 1.0)) ** 2)  # the formula, from the arrays
    sc = tb.th.comp.scenario
    if op.phase == "dQ":
        r = [sc.labels[i] for i in pr.rows].index(row)
        return np.asarray(ds[r][pr.allowed[r]])
    c = [sc.key_labels[j] for j in pr.cols].index(row)
    return np.asarray(ds[:, c][pr.allowed[:, c]])


def test_under_a_cap_the_tiled_backward_says_dscaled_and_its_numbers_are_dscaled() -> None:
    comp = compute(parse_scenario(CAPPED, "capped.toml"))
    checked = 0
    for h, hr in enumerate(comp.heads):
        assert hr.part(Capped) is not None
        tb = tiled_backward(tiled(comp, h, 2))
        ops = _ops(tb)
        for k, (phase, arithmetic, meaning, formula) in enumerate(ops):
            assert "dS·K" not in meaning and "dSᵀ·Q" not in meaning, meaning
            assert "dS·K" not in formula and "dSᵀ·Q" not in formula
            assert "dQ += dscaled·K" in formula and "dK += dscaledᵀ·Q" in formula
            if phase in ("dQ", "dK"):
                m = ACCUMULATE.match(arithmetic)
                if m is None:
                    assert "unchanged" in arithmetic
                    continue
                name, row = m.group(3), m.group(2)
                assert name == "dscaled"
                printed = np.array([float(w) for w in WEIGHT.findall(m.group(5))])
                named = _named_weights(tb, k, name, row)
                assert printed.shape == named.shape
                assert np.allclose(printed, named, rtol=1e-5, atol=2e-6), (arithmetic, named)
                checked += 1
        assert "dscaled" in ops[-1][2] and "1 − tanh²(s/c)" in ops[-1][2]
        assert back_explanation(tb, len(tb) - 1, 0, 3).details[-1].endswith(
            "(dQ = dscaled·K/scale, dK = dscaledᵀ·Q/scale, dV = Pᵀ·dO)")
        # the cap's factor matters in this scenario: dS's weights would be other numbers
        assert not np.allclose(tb.grads.heads[h].attend.dS, tb.grads.heads[h].attend.dscaled)
    assert checked > 4


def test_without_a_cap_the_tiled_backward_keeps_ds() -> None:
    comp = compute(parse_scenario(UNCAPPED, "uncapped.toml"))
    assert all(hr.part(Capped) is None for hr in comp.heads)
    tb = tiled_backward(tiled(comp, 0, 2))
    checked = 0
    for k, (phase, arithmetic, meaning, formula) in enumerate(_ops(tb)):
        assert "dscaled" not in meaning and "dscaled" not in formula and "dscaled" not in arithmetic
        if phase in ("dQ", "dK") and (m := ACCUMULATE.match(arithmetic)) is not None:
            assert m.group(3) == "dS"
            printed = np.array([float(w) for w in WEIGHT.findall(m.group(5))])
            assert np.allclose(printed, _named_weights(tb, k, "dS", m.group(2)), rtol=1e-5, atol=2e-6)
            checked += 1
    assert checked > 4
    assert back_explanation(tb, len(tb) - 1, 0, 3).details[-1].endswith("(dQ = dS·K/scale, dK = dSᵀ·Q/scale, dV = Pᵀ·dO)")
