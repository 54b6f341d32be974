"""The forward pass is written once (qkv_tui/kernels), and each policy keeps its own promise.

(1) On generated scenarios: the exact policy agrees with the loop reference of tests/modern_cases.py;
the by-hand policy's every table is what a person gets from its own rounded operands (each product,
sum, quotient and exponential rounded with Python's correctly rounded ``round``); the printed page's
every table is the exact result of its printed operands, rounded once. The two rounded checks are
local (each table from the policy's own operands), so a digit that flips at a tie moves one unit of
the last place, not the rest of the page.

(2) Read from the source: no module outside qkv_tui/kernels defines a softmax, a RoPE rotation or a
norm of its own.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute
from qkv_tui.core.engine import Computation
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.variants.alibi import TABLE as ALIBI
from qkv_tui.edges.worksheet.chain import Table, chain, kv_owners
from qkv_tui.kernels.alibi import Biased
from qkv_tui.kernels.rope import Rotated
from qkv_tui.kernels.sinks import Sunk
from qkv_tui.teach.handcalc import compute_hand

from .variants_cases import ModernCase, modern_cases, reference

PACKAGE = Path(__file__).resolve().parent.parent / "qkv_tui"


# --- (1) the three policies -------------------------------------------------------------------


def _close(a: object, b: object, tol: float) -> None:
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    assert x.shape == y.shape
    finite = np.isfinite(x) | np.isfinite(y)
    assert np.array_equal(np.isfinite(x), np.isfinite(y))
    assert np.all(np.abs(x[finite] - y[finite]) <= tol * np.maximum(1.0, np.abs(y[finite]))), (x, y)


def _unit(d: int) -> float:
    """One unit of the last decimal, and a little: a sum in another order may land on the other side of a tie."""
    return 1.000001 * 10.0**-d


def _within(kept: object, loop: list[list[float]] | list[float], d: int) -> None:
    x, y = np.asarray(kept, dtype=float), np.asarray(loop, dtype=float)
    assert x.shape == y.shape
    assert np.array_equal(np.isfinite(x), np.isfinite(y))
    ok = np.isfinite(y)
    assert np.all(np.abs(x[ok] - y[ok]) <= _unit(d)), (x, y)


def _loop_matmul(a: np.ndarray, b: np.ndarray, keep: Keep) -> list[list[float]]:
    out = []
    for row in a:
        cells = []
        for c in range(b.shape[1]):
            total = 0.0
            for k in range(len(row)):
                total += keep.worked(float(row[k]) * float(b[k, c]))
            cells.append(keep.worked(total))
        out.append(cells)
    return out


class Keep:
    """The policies' rule for one number, written again with Python's ``round``."""

    def __init__(self, d: int, by_hand: bool) -> None:
        self.d, self.by_hand = d, by_hand

    def worked(self, x: float) -> float:
        return round(x, self.d) if self.by_hand and math.isfinite(x) else x

    def table(self, x: float) -> float:
        return round(x, self.d) if math.isfinite(x) else x


def _exact(case: ModernCase) -> Computation:
    return compute(parse_scenario(case.toml, "generated.toml"))


@settings(max_examples=40, deadline=None)
@given(modern_cases())
def test_exact_agrees_with_the_loop_reference(case: ModernCase) -> None:
    comp = _exact(case)
    ref = reference(case)
    for hr, want in zip(comp.heads, ref["heads"], strict=True):
        for name in ("Q", "K", "V", "scores", "weights", "output"):
            _close(getattr(hr, name), want[name], 1e-9)
        if hr.part(Rotated) is not None:
            _close(hr.need(Rotated).Q_rot, want["Q_rot"], 1e-9)
            _close(hr.need(Rotated).K_rot, want["K_rot"], 1e-9)
        _close(hr.scaled, want["scaled"], 1e-9)
        if hr.part(Biased) is not None:
            _close(hr.need(Biased).bias, want["bias"], 1e-9)
    _close(comp.output, ref["output"], 1e-9)
    if comp.norm is not None:
        _close(comp.norm.X_norm, ref["X_norm"], 1e-9)


@settings(max_examples=40, deadline=None)
@given(modern_cases(), st.integers(2, 4))
def test_by_hand_every_table_is_worked_from_its_rounded_operands(case: ModernCase, d: int) -> None:
    comp = _exact(case)
    hand = compute_hand(comp, d)
    keep = Keep(d, by_hand=True)
    sc = comp.scenario
    if hand.norm is not None:
        assert sc.norm is not None
        nr = hand.norm
        for i, x in enumerate(sc.X):
            mu = float(nr.mean[i])
            centred = [keep.worked(float(v) - mu) for v in x]
            if sc.norm.kind == "layer":
                assert abs(mu - keep.table(sum(float(v) for v in x) / len(x))) <= _unit(d)
            spread = keep.table(sum(keep.worked(c * c) for c in centred) / len(x))
            assert abs(float(nr.spread[i]) - spread) <= _unit(d)
            exact_root = math.sqrt(float(nr.spread[i]) + sc.norm.eps)
            root = keep.worked(exact_root) or exact_root  # never a division by a rounded 0 (the table shows 0 then)
            assert abs(float(nr.root[i]) - keep.table(root)) <= _unit(d)
            beta = sc.norm.beta if sc.norm.beta is not None else np.zeros(len(x))
            want = [keep.table(keep.worked(c / root * float(g) + float(b)))
                    for c, g, b in zip(centred, sc.norm.gamma, beta, strict=True)]
            _within(nr.X_norm[i], want, d)
    X_in = sc.X if hand.norm is None else hand.norm.X_norm
    X_kv = sc.X_kv if sc.is_cross else X_in
    for hr in hand.heads:
        for name, src, W, b in (("Q", X_in, hr.W_Q, hr.b_Q), ("K", X_kv, hr.W_K, hr.b_K), ("V", X_kv, hr.W_V, hr.b_V)):
            products = _loop_matmul(src, W, keep)
            _within(getattr(hr, name), [[keep.table(v + (float(b[c]) if b is not None else 0.0))
                                         for c, v in enumerate(row)] for row in products], d)
        if hr.part(Rotated) is not None:
            assert sc.rope is not None and sc.positions is not None and hr.part(Rotated) is not None
            for M, turned in ((hr.Q, hr.need(Rotated).Q_rot), (hr.K, hr.need(Rotated).K_rot)):
                _within(turned, _loop_rotate(M, sc.rope.base, sc.rope.layout, sc.positions, keep), d)
        _within(hr.scores, _loop_matmul(hr.Q_used, hr.K_used.T, keep), d)
        div = keep.worked(math.sqrt(hr.d_k) if hr.scale_is_default else hr.scale) or hr.scale
        assert abs(hr.scale - div) <= 1e-12
        _within(hr.scaled, [[keep.table(float(s) / div) for s in row] for row in hr.scores], d)
        for i in range(sc.n):
            allowed = [j for j in range(sc.m) if sc.allow[i, j]]
            bias = hr.read(Biased, lambda b: b.bias)
            logits = [float(hr.scaled[i, j]) + (float(bias[i, j]) if bias is not None else 0.0) for j in allowed]
            if hr.part(Biased) is not None:
                logits = [keep.table(v) for v in logits]
            _within(hr.masked[i, allowed], logits, d)
            top = max([float(hr.masked[i, j]) for j in allowed] + ([hr.need(Sunk).sink] if hr.part(Sunk) is not None else []))
            exps = [keep.table(keep.worked(math.exp(keep.worked(float(hr.masked[i, j]) - top)))) for j in allowed]
            _within(hr.exps[i, allowed], exps, d)
            total = sum(float(hr.exps[i, j]) for j in allowed)
            if hr.part(Sunk) is not None:
                assert hr.part(Sunk) is not None
                sink_e = keep.worked(math.exp(keep.worked(hr.need(Sunk).sink - top)))
                assert abs(float(hr.need(Sunk).sink_exp[i]) - sink_e) <= _unit(d)
                total += float(hr.need(Sunk).sink_exp[i])
            assert abs(float(hr.row_sum[i]) - keep.worked(total)) <= _unit(d)
            _within(hr.weights[i, allowed], [keep.table(float(hr.exps[i, j]) / float(hr.row_sum[i])) for j in allowed],
                    d)
        _within(hr.output, _loop_matmul(hr.weights, hr.V, keep), d)


def test_by_hand_a_root_that_rounds_to_0_divides_by_the_exact_one() -> None:
    text = 'tokens = ["t0"]\nX = [[0]]\n[norm]\nkind = "rms"\n[[heads]]\nname = "h0"\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[1]]\n'
    hand = compute_hand(compute(parse_scenario(text, "a.toml")), 2)
    assert hand.norm is not None
    # √(0 + 1e-5) ≈ 0.00316 would be written 0.00: a statistic below 0.1 keeps two significant digits (0.0032), so
    # what reads it back (dNorm) never divides by 0
    assert float(hand.norm.root[0]) == 0.0032
    assert float(hand.norm.X_norm[0, 0]) == 0.0  # 0 / 0.0032, not 0 / 0


def _loop_rotate(M: np.ndarray, base: float, layout: str, positions: tuple[int, ...], keep: Keep) -> list[list[float]]:
    out = []
    for r, row in enumerate(M):
        d_k = len(row)
        new = [float(v) for v in row]
        for i in range(d_k // 2):
            a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + d_k // 2)
            angle = positions[r] * base ** (-2 * i / d_k)
            c, s = keep.worked(math.cos(angle)), keep.worked(math.sin(angle))
            x, y = float(row[a]), float(row[b])
            new[a] = keep.worked(x * c) - keep.worked(y * s)
            new[b] = keep.worked(x * s) + keep.worked(y * c)
        out.append([keep.table(v) for v in new])
    return out


@settings(max_examples=40, deadline=None)
@given(modern_cases(), st.integers(2, 4))
def test_the_printed_page_works_each_table_from_the_printed_ones(case: ModernCase, d: int) -> None:
    comp = _exact(case)
    sc = comp.scenario
    tables: dict[str, Table] = {t.key: t for t in chain(comp, d)}
    keep = Keep(d, by_hand=False)

    def exact_matmul(a: np.ndarray, b: np.ndarray) -> list[list[float]]:
        return [[keep.table(v) for v in row] for row in _loop_matmul(a, b, keep)]

    X_src = tables["X_norm"].values if "X_norm" in tables else sc.X
    X_kv = sc.context_X if sc.context_X is not None else X_src
    owners = kv_owners(sc)
    for h, head in enumerate(sc.heads):
        g = owners[h]
        for name, src, W, b in (("Q", X_src, head.W_Q, head.b_Q), ("K", X_kv, head.W_K, head.b_K),
                                ("V", X_kv, head.W_V, head.b_V)):
            if name != "Q" and g != h:
                continue
            raw = _loop_matmul(src, W, keep)
            _within(tables[f"{name}.{h}"].values, [[keep.table(v + (float(b[c]) if b is not None else 0.0))
                                                    for c, v in enumerate(row)] for row in raw], d)
        Q = tables[f"Q_rot.{h}"].values if sc.rope is not None else tables[f"Q.{h}"].values
        K = tables[f"K_rot.{g}"].values if sc.rope is not None else tables[f"K.{g}"].values
        _within(tables[f"scores.{h}"].values, exact_matmul(Q, K.T), d)
        scores = tables[f"scores.{h}"].values
        slope = float(tables["slopes"].values[0, h]) if ALIBI.of(sc) is not None else None
        scaled = tables[f"scaled.{h}"].values
        for i in range(sc.n):
            allowed = [j for j in range(sc.m) if sc.allow[i, j]]
            logits = []
            for j in allowed:
                v = float(scores[i, j]) / comp.heads[h].scale
                if slope is not None:
                    assert sc.positions is not None
                    v += slope * (sc.positions[j] - sc.positions[i])
                logits.append(keep.table(v))
            _within(scaled[i, allowed], logits, d)
            row = [float(scaled[i, j]) for j in allowed]
            top = max(row + ([head.sink] if head.sink is not None else []))
            e = [math.exp(v - top) for v in row]
            total = sum(e) + (math.exp(head.sink - top) if head.sink is not None else 0.0)
            _within(tables[f"weights.{h}"].values[i, allowed], [keep.table(x / total) for x in e], d)
        _within(tables[f"output.{h}"].values, exact_matmul(tables[f"weights.{h}"].values, tables[f"V.{g}"].values), d)


# --- (2) one implementation of each operation ---------------------------------------------------

# modules outside the kernels that still hold a copy, and why; each should call qkv_tui.kernels instead
KNOWN: dict[str, str] = {}  # a module allowed its own copy for now, with the reason (none today)


def _names(node: ast.AST) -> set[str]:
    found: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            found.add(n.id.lower())
        elif isinstance(n, ast.Attribute):
            found.add(n.attr.lower())
    return found


def _has_product(node: ast.AST) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) for n in ast.walk(node))


def _is_call(node: ast.AST, modules: tuple[str, ...], name: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name
            and isinstance(node.func.value, ast.Name) and node.func.value.id in modules)


def _negated(node: ast.AST) -> bool:
    """−x or −1.702·x: an activation's e^(−x), not a softmax's."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return True
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and (_negated(node.left) or _negated(node.right))


def own_kernels(source: str) -> list[str]:
    """What in ``source`` computes a kernel's operation itself over arrays, one line each.

    Scalar ``math`` on numbers as shown (``math.exp(shown(t))``, ``math.sqrt(shown(s) + eps)``) is a
    line of working that a calculator repeats, the subject of the trace and worksheet views: it is
    not looked for."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        # a softmax's exponentials: NumPy's e^ over an array that is not an activation's −x
        if _is_call(node, ("np", "numpy"), "exp") and not _negated(node.args[0]):  # type: ignore[attr-defined]
            found.append(f"{line}: np.exp of {ast.unparse(node.args[0])}")  # type: ignore[attr-defined]
        # RoPE's turn: a·cos ∓ b·sin (or a·sin + b·cos)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            left, right = _names(node.left), _names(node.right)
            trig = (any("cos" in n for n in left) and any("sin" in n for n in right)) or (
                any("sin" in n for n in left) and any("cos" in n for n in right))
            if trig and _has_product(node.left) and _has_product(node.right):
                found.append(f"{line}: a rotation {ast.unparse(node)}")
        # the soft-cap's c·tanh(s/c) over arrays (a GELU's tanh of a product is an activation)
        if (_is_call(node, ("np", "numpy"), "tanh") and isinstance(node.args[0], ast.BinOp)  # type: ignore[attr-defined]
                and isinstance(node.args[0].op, ast.Div)):  # type: ignore[attr-defined]
            found.append(f"{line}: np.tanh of {ast.unparse(node.args[0])}")  # type: ignore[attr-defined]
        # a norm's root over arrays: √(statistic + eps)
        if (_is_call(node, ("np", "numpy"), "sqrt")
                and "eps" in _names(node.args[0])):  # type: ignore[attr-defined]
            found.append(f"{line}: a norm's root {ast.unparse(node)}")
        # a mean of squares: (x·x).mean() or (x**2).mean()
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "mean"
                and isinstance(node.func.value, ast.BinOp) and isinstance(node.func.value.op, (ast.Mult, ast.Pow))):
            found.append(f"{line}: a mean of squares {ast.unparse(node)}")
    return found


OUTSIDE = sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "kernels")


@pytest.mark.parametrize("path", OUTSIDE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_outside_the_kernels_computes_a_kernel_itself(path: Path) -> None:
    key = str(path.relative_to(PACKAGE))
    found = own_kernels(path.read_text(encoding="utf-8"))
    if key in KNOWN:
        pytest.skip(KNOWN[key])
    assert not found, f"{key} computes what qkv_tui/kernels does: " + "; ".join(found)


def test_the_kernels_hold_each_operation() -> None:
    found = {p.name: own_kernels(p.read_text(encoding="utf-8")) for p in (PACKAGE / "kernels").glob("*.py")}
    assert any("np.exp" in f for f in found["softmax.py"])
    assert any("np.tanh" in f for f in found["softcap.py"])  # the soft-cap
    assert any("rotation" in f for f in found["rope.py"])
    assert any("root" in f for f in found["norm.py"])
    assert any("mean of squares" in f for f in found["stats.py"])  # the overflow-safe row statistics


# the implementations the kernels replaced, as they were: the check must find each
FORMER = {
    "engine softmax": "def softmax_rows(masked):\n    row_max = masked.max(axis=1)\n"
                      "    exps = np.exp(masked - row_max[:, None])\n    return exps / exps.sum(axis=1)[:, None]\n",
    "importer softmax": "scores = np.where(allow, q @ k.T / scale, -np.inf)\n"
                        "weights = np.exp(scores - scores.max(axis=1, keepdims=True))\n",
    "hand softmax": "shifted = round_to(masked - row_max[:, None], decimals)\nexps = r(np.exp(shifted))\n",
    "tile exponentials": "def _exp_diff(a, b):\n    diff = a - b\n    return np.exp(np.where(np.isnan(diff), 0.0, diff))\n",
    "engine rotate": "out[:, a] = M[:, a] * cos - M[:, b] * sin\nout[:, b] = M[:, a] * sin + M[:, b] * cos\n",
    "hand rotate": "out[:, a] = round_to(M[:, a] * cos, decimals) - round_to(M[:, b] * sin, decimals)\n",
    "worksheet rotate": "out[:, a] = M[:, a] * cos[:, i] - M[:, b] * sin[:, i]\n",
    "importer rms": "out = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + self.eps) * self.gamma\n",
    "engine norm": "root = np.sqrt(spread + norm.eps)\n",
    "engine mean square": "plain = (C * C).mean(axis=1)\n",
    "tile soft-cap": "S = masked_logits(cap * np.tanh(dots / divisor / cap), allowed, tile_bias)\n",
}


@pytest.mark.parametrize("what", sorted(FORMER))
def test_the_check_finds_the_former_copies(what: str) -> None:
    assert own_kernels(FORMER[what]), what


def test_an_activation_is_not_a_softmax() -> None:
    assert own_kernels("def silu(x):\n    return x / (1.0 + np.exp(-x))\nq = lambda x: np.exp(-1.702 * x)\n") == []


def test_a_gelu_is_not_a_soft_cap() -> None:
    gelu = "y = 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))\n"
    assert own_kernels(gelu) == []
