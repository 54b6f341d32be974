"""Hypothesis strategies: random but valid scenarios written as TOML text, plus a loop reference."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

number = st.one_of(
    st.integers(-3, 3),
    st.floats(-2, 2, allow_nan=False, allow_infinity=False).map(lambda x: round(x, 2)),
)


def matrix(rows: int, cols: int) -> st.SearchStrategy[list[list[float]]]:
    return st.lists(st.lists(number, min_size=cols, max_size=cols), min_size=rows, max_size=rows)


@dataclass
class Case:
    toml: str
    tokens: list[str]
    X: list[list[float]]
    X_kv: list[list[float]]
    heads: list[dict[str, Any]]
    allow: list[list[bool]]
    scale: float | None
    W_O: list[list[float]] | None


def _toml_matrix(m: list[list[float]]) -> str:
    return "[" + ", ".join("[" + ", ".join(repr(v) for v in row) + "]" for row in m) + "]"


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n = draw(st.integers(1, 5))
    cross = draw(st.booleans())
    m = draw(st.integers(1, 5)) if cross else n
    d_model = draw(st.integers(1, 4))
    d_in = draw(st.integers(1, 4)) if cross else d_model
    tokens = [f"t{i}" for i in range(n)]
    key_tokens = [f"c{j}" for j in range(m)] if cross else tokens
    X = draw(matrix(n, d_model))
    X_kv = draw(matrix(m, d_in)) if cross else X
    kinds = ["none", "padding", "custom"] + ([] if cross else ["causal"])
    kind = draw(st.sampled_from(kinds))
    lines = [f"tokens = {tokens!r}".replace("'", '"'), f"X = {_toml_matrix(X)}"]
    allow = [[True] * m for _ in range(n)]
    if kind == "causal":
        allow = [[j <= i for j in range(m)] for i in range(n)]
        lines.append('mask = "causal"')
    elif kind == "padding":
        pad = draw(st.lists(st.booleans(), min_size=m, max_size=m))
        keep = draw(st.integers(0, m - 1))
        pad[keep] = False  # every query must keep a key
        allow = [[not p for p in pad] for _ in range(n)]
        lines.append(f'mask = {{ kind = "padding", pad = [{", ".join("true" if p else "false" for p in pad)}] }}')
    elif kind == "custom":
        allow = draw(st.lists(st.lists(st.booleans(), min_size=m, max_size=m), min_size=n, max_size=n))
        for i, row in enumerate(allow):
            if not any(row):
                row[draw(st.integers(0, m - 1))] = True
            allow[i] = row
        body = ", ".join("[" + ", ".join("1" if a else "0" for a in row) + "]" for row in allow)
        lines.append(f'mask = {{ kind = "custom", allow = [{body}] }}')
    scale = draw(st.one_of(st.none(), st.sampled_from([1.0, 0.5, 2.0, 3.5])))
    if scale is not None:
        lines.append(f"scale = {scale!r}")
    heads = []
    for _ in range(draw(st.integers(1, 3))):
        d_k, d_v = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        head = {"W_Q": draw(matrix(d_model, d_k)), "W_K": draw(matrix(d_in, d_k)), "W_V": draw(matrix(d_in, d_v))}
        heads.append(head)
    W_O = None
    if draw(st.booleans()):
        W_O = draw(matrix(sum(len(h["W_V"][0]) for h in heads), draw(st.integers(1, 3))))
    if cross:
        lines += ["[context]", f"tokens = {key_tokens!r}".replace("'", '"'), f"X = {_toml_matrix(X_kv)}"]
    for h, head in enumerate(heads):
        lines += ["[[heads]]", f'name = "h{h}"']
        lines += [f"{role} = {_toml_matrix(head[role])}" for role in ("W_Q", "W_K", "W_V")]
    if W_O is not None:
        lines += ["[output]", f"W_O = {_toml_matrix(W_O)}"]
    return Case("\n".join(lines) + "\n", tokens, X, X_kv, heads, allow, scale, W_O)


def matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    return [[sum(a[i][k] * b[k][j] for k in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]


def reference(case: Case) -> dict[str, Any]:
    """Attention written out with loops and the math module: nothing shared with the engine."""
    heads = []
    for head in case.heads:
        Q, K, V = matmul(case.X, head["W_Q"]), matmul(case.X_kv, head["W_K"]), matmul(case.X_kv, head["W_V"])
        d_k = len(head["W_Q"][0])
        div = case.scale if case.scale is not None else math.sqrt(d_k)
        scores = [[sum(q[c] * k[c] for c in range(d_k)) for k in K] for q in Q]
        weights = []
        for i, row in enumerate(scores):
            kept = [s / div for j, s in enumerate(row) if case.allow[i][j]]
            top = max(kept)
            e = [math.exp(s / div - top) if case.allow[i][j] else 0.0 for j, s in enumerate(row)]
            total = sum(e)
            weights.append([x / total for x in e])
        out = matmul(weights, V)
        heads.append({"Q": Q, "K": K, "V": V, "scores": scores, "weights": weights, "output": out})
    concat = [[v for h in heads for v in h["output"][i]] for i in range(len(case.X))]
    final = matmul(concat, case.W_O) if case.W_O is not None else concat
    return {"heads": heads, "concat": concat, "output": final}
