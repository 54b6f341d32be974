"""Hypothesis scenarios that combine every variant feature, and a loop reference that shares nothing with the engine.

A generated case is plain Python data plus the TOML text that describes it. The
reference works from the data with loops and the math module only, writing each
formula of docs/scenario-format.md out again, so a mistake in the engine cannot hide in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

number = st.one_of(
    st.integers(-3, 3),
    st.floats(-2, 2, allow_nan=False, allow_infinity=False).map(lambda x: round(x, 2)),
)


def vec(count: int) -> st.SearchStrategy[list[float]]:
    return st.lists(number, min_size=count, max_size=count)


def matrix(rows: int, cols: int) -> st.SearchStrategy[list[list[float]]]:
    return st.lists(vec(cols), min_size=rows, max_size=rows)


@dataclass
class ModernCase:
    toml: str
    n: int
    X: list[list[float]]
    X_kv: list[list[float]]  # the context's X for cross-attention, else X (normalised by the reference)
    cross: bool
    heads: list[dict[str, Any]]  # per query head: W_Q, W_K, W_V, b_Q, b_K, b_V, sink, kv (K/V head index)
    allow: list[list[bool]]
    scale: float | None
    norm: dict[str, Any] | None = None  # kind, gamma, beta, eps
    rope: dict[str, Any] | None = None  # base, layout, positions
    slopes: list[float] | None = None
    W_O: list[list[float]] | None = None
    b_O: list[float] | None = None
    lines: list[str] = field(default_factory=list)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return repr(value)


def press_slopes(n: int) -> list[float]:
    """ALiBi's default slopes as the paper's code computes them (Press et al., ``get_slopes`` in
    github.com/ofirpress/attention_with_linear_biases), written out again here as the reference."""

    def get_slopes_power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return get_slopes_power_of_2(closest_power_of_2) + press_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]


@st.composite
def modern_cases(draw: st.DrawFn, cross: bool | None = None, rope: bool = False) -> ModernCase:
    """A scenario combining norm, biases, rope, GQA, alibi, sliding windows, sinks and W_O + b_O."""
    n = draw(st.integers(1, 5))
    is_cross = draw(st.booleans()) if cross is None else cross
    is_cross = is_cross and draw(st.integers(0, 3)) == 0  # mostly self-attention: rope, alibi and sliding need it
    m = draw(st.integers(1, 4)) if is_cross else n
    d_model = draw(st.integers(1, 4))
    d_in = draw(st.integers(1, 4)) if is_cross else d_model
    tokens = [f"t{i}" for i in range(n)]
    X = draw(matrix(n, d_model))
    X_kv = draw(matrix(m, d_in)) if is_cross else X
    top: list[str] = [f"tokens = {toml_value(tokens)}", f"X = {toml_value(X)}"]
    tables: list[str] = []

    use_rope = not is_cross and (rope or draw(st.booleans()))
    d_k = draw(st.sampled_from([2, 4])) if use_rope else draw(st.integers(1, 3))
    d_v = draw(st.integers(1, 3))

    norm = None
    if draw(st.booleans()):
        kind = draw(st.sampled_from(["rms", "layer"]))
        norm = {"kind": kind, "gamma": [1.0] * d_model, "beta": None, "eps": 1e-5}
        tables += ["[norm]", f'kind = "{kind}"']
        if draw(st.booleans()):
            norm["gamma"] = draw(vec(d_model))
            tables.append(f"gamma = {toml_value(norm['gamma'])}")
        if kind == "layer" and draw(st.booleans()):
            norm["beta"] = draw(vec(d_model))
            tables.append(f"beta = {toml_value(norm['beta'])}")
        if draw(st.booleans()):
            norm["eps"] = draw(st.sampled_from([1e-6, 0.5, 1.0]))
            tables.append(f"eps = {norm['eps']!r}")

    rope_table = None
    if use_rope:
        layout = draw(st.sampled_from(["interleaved", "half"]))
        base = draw(st.sampled_from([10000.0, 100.0, 10.0, 2.0]))
        positions = list(range(n))
        tables += ["[rope]", f'layout = "{layout}"', f"base = {base!r}"]
        if draw(st.booleans()):
            positions = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
            tables.append(f"positions = {toml_value(positions)}")
        rope_table = {"base": base, "layout": layout, "positions": positions}

    split = draw(st.booleans())
    if split:
        num_heads = draw(st.sampled_from([1, 2, 4]))
        num_kv = draw(st.sampled_from([d for d in (1, 2, 4) if num_heads % d == 0]))
    else:
        num_heads = draw(st.integers(1, 3))
        num_kv = num_heads
    use_bias = {role: draw(st.booleans()) for role in ("Q", "K", "V")}
    use_sinks = draw(st.booleans())
    heads: list[dict[str, Any]] = []
    kv_parts = [
        {
            "W_K": draw(matrix(d_in, d_k)), "W_V": draw(matrix(d_in, d_v)),
            "b_K": draw(vec(d_k)) if use_bias["K"] else None, "b_V": draw(vec(d_v)) if use_bias["V"] else None,
        }
        for _ in range(num_kv)
    ]
    for h in range(num_heads):
        kv = h * num_kv // num_heads
        heads.append({
            "W_Q": draw(matrix(d_model, d_k)), "b_Q": draw(vec(d_k)) if use_bias["Q"] else None,
            "sink": draw(number) if use_sinks else None, "kv": kv, **kv_parts[kv],
        })

    slopes = None
    if not is_cross and draw(st.booleans()):
        tables.append("[alibi]")
        if draw(st.booleans()):
            slopes = draw(st.lists(st.sampled_from([0.5, 0.25, 1.0, -0.5, 0.125]), min_size=num_heads, max_size=num_heads))
            tables.append(f"slopes = {toml_value(slopes)}")
        else:
            slopes = press_slopes(num_heads)
        if rope_table is not None and rope_table["positions"] != sorted(rope_table["positions"]):
            # ALiBi needs positions that never decrease (docs/scenario-format.md): keep them in order
            tables[tables.index(f"positions = {toml_value(rope_table['positions'])}")] = \
                f"positions = {toml_value(sorted(rope_table['positions']))}"
            rope_table["positions"] = sorted(rope_table["positions"])

    # ALiBi allows no key after its query: causal, sliding, or a custom mask below the diagonal
    kinds = ["causal", "sliding", "custom"] if slopes is not None else (
        ["none", "padding", "custom"] + ([] if is_cross else ["causal", "sliding"]))
    kind = draw(st.sampled_from(kinds))
    allow = [[True] * m for _ in range(n)]
    if kind == "causal":
        allow = [[j <= i for j in range(m)] for i in range(n)]
        top.append('mask = "causal"')
    elif kind == "sliding":
        window = draw(st.integers(1, 4))
        allow = [[0 <= i - j < window for j in range(m)] for i in range(n)]
        tables += ["[mask]", 'kind = "sliding"', f"window = {window}"]
    elif kind == "padding":
        pad = draw(st.lists(st.booleans(), min_size=m, max_size=m))
        pad[draw(st.integers(0, m - 1))] = False
        allow = [[not p for p in pad] for _ in range(n)]
        tables += ["[mask]", 'kind = "padding"', f"pad = {toml_value(pad)}"]
    elif kind == "custom":
        allow = draw(st.lists(st.lists(st.booleans(), min_size=m, max_size=m), min_size=n, max_size=n))
        if slopes is not None:
            allow = [[flag and j <= i for j, flag in enumerate(row)] for i, row in enumerate(allow)]
        for i, row in enumerate(allow):
            if not any(row):
                row[draw(st.integers(0, min(i, m - 1) if slopes is not None else m - 1))] = True
        tables += ["[mask]", 'kind = "custom"', f"allow = {toml_value(allow)}"]

    scale = draw(st.one_of(st.none(), st.sampled_from([1.0, 0.5, 2.0])))
    if scale is not None:
        top.append(f"scale = {scale!r}")

    if is_cross:
        tables += ["[context]", f"tokens = {toml_value([f'c{j}' for j in range(m)])}", f"X = {toml_value(X_kv)}"]
    if split:
        def wide(key: str, parts: list[dict[str, Any]]) -> list[list[float]]:
            return [[v for p in parts for v in p[key][r]] for r in range(len(parts[0][key]))]

        tables += ["[attention]", f"num_heads = {num_heads}"]
        if num_kv != num_heads or draw(st.booleans()):
            tables.append(f"num_kv_heads = {num_kv}")
        tables += [
            f"W_Q = {toml_value(wide('W_Q', heads))}",
            f"W_K = {toml_value(wide('W_K', kv_parts))}",
            f"W_V = {toml_value(wide('W_V', kv_parts))}",
        ]
        if use_bias["Q"]:
            tables.append(f"b_Q = {toml_value([v for h in heads for v in h['b_Q']])}")
        for role in ("K", "V"):
            if use_bias[role]:
                tables.append(f"b_{role} = {toml_value([v for p in kv_parts for v in p['b_' + role]])}")
        if use_sinks:
            tables.append(f"sinks = {toml_value([h['sink'] for h in heads])}")
    else:
        for h, head in enumerate(heads):
            tables += ["[[heads]]", f'name = "h{h}"']
            tables += [f"{role} = {toml_value(head[role])}" for role in ("W_Q", "W_K", "W_V")]
            tables += [f"b_{role} = {toml_value(head['b_' + role])}" for role in "QKV" if head["b_" + role] is not None]
            if head["sink"] is not None:
                tables.append(f"sink = {head['sink']!r}")

    W_O = b_O = None
    if draw(st.booleans()):
        d_out = draw(st.integers(1, 3))
        W_O = draw(matrix(num_heads * d_v, d_out))
        tables += ["[output]", f"W_O = {toml_value(W_O)}"]
        if draw(st.booleans()):
            b_O = draw(vec(d_out))
            tables.append(f"b_O = {toml_value(b_O)}")
    text = "\n".join(top + tables) + "\n"
    return ModernCase(text, n, X, X_kv, is_cross, heads, allow, scale, norm, rope_table, slopes, W_O, b_O)


# --- the reference: loops and the math module ---------------------------------


def project(rows: list[list[float]], W: list[list[float]], b: list[float] | None) -> list[list[float]]:
    out = []
    for x in rows:
        cells = []
        for c in range(len(W[0])):
            total = 0.0
            for k in range(len(x)):
                total += x[k] * W[k][c]
            cells.append(total + (b[c] if b is not None else 0.0))
        out.append(cells)
    return out


def ref_norm(X: list[list[float]], norm: dict[str, Any]) -> list[list[float]]:
    out = []
    for x in X:
        d = len(x)
        if norm["kind"] == "rms":
            mu = 0.0
            spread = sum(v * v for v in x) / d
        else:
            mu = sum(x) / d
            spread = sum((v - mu) ** 2 for v in x) / d
        root = math.sqrt(spread + norm["eps"])
        beta = norm["beta"] or [0.0] * d
        out.append([(x[c] - mu) / root * norm["gamma"][c] + beta[c] for c in range(d)])
    return out


def ref_rotate(M: list[list[float]], rope: dict[str, Any]) -> list[list[float]]:
    out = []
    for r, row in enumerate(M):
        d = len(row)
        new = list(row)
        p = rope["positions"][r]
        for i in range(d // 2):
            a, b = (2 * i, 2 * i + 1) if rope["layout"] == "interleaved" else (i, i + d // 2)
            angle = p * rope["base"] ** (-2 * i / d)
            new[a] = row[a] * math.cos(angle) - row[b] * math.sin(angle)
            new[b] = row[a] * math.sin(angle) + row[b] * math.cos(angle)
        out.append(new)
    return out


def reference(case: ModernCase) -> dict[str, Any]:
    """Every §7 formula written out again, with loops."""
    X = ref_norm(case.X, case.norm) if case.norm is not None else case.X
    X_kv = case.X_kv if case.cross else X
    positions = case.rope["positions"] if case.rope is not None else list(range(case.n))
    heads = []
    for h, head in enumerate(case.heads):
        Q = project(X, head["W_Q"], head["b_Q"])
        K = project(X_kv, head["W_K"], head["b_K"])
        V = project(X_kv, head["W_V"], head["b_V"])
        Qr = ref_rotate(Q, case.rope) if case.rope is not None else Q
        Kr = ref_rotate(K, case.rope) if case.rope is not None else K
        d_k = len(head["W_Q"][0])
        div = case.scale if case.scale is not None else math.sqrt(d_k)
        scores = [[sum(q[c] * k[c] for c in range(d_k)) for k in Kr] for q in Qr]
        scaled = [[s / div for s in row] for row in scores]
        bias = None
        if case.slopes is not None:
            bias = [[case.slopes[h] * (positions[j] - positions[i]) for j in range(case.n)] for i in range(case.n)]
        weights = []
        for i, row in enumerate(scaled):
            logits = [s + (bias[i][j] if bias is not None else 0.0) for j, s in enumerate(row)]
            kept = [x for j, x in enumerate(logits) if case.allow[i][j]]
            top = max(kept) if head["sink"] is None else max(max(kept), head["sink"])
            e = [math.exp(x - top) if case.allow[i][j] else 0.0 for j, x in enumerate(logits)]
            total = sum(e) + (math.exp(head["sink"] - top) if head["sink"] is not None else 0.0)
            weights.append([x / total for x in e])
        out = project(weights, V, None)
        heads.append({
            "Q": Q, "K": K, "V": V, "Q_rot": Qr if case.rope else None, "K_rot": Kr if case.rope else None,
            "scores": scores, "scaled": scaled, "bias": bias, "weights": weights, "output": out, "kv_head": head["kv"],
        })
    concat = [[v for h in heads for v in h["output"][i]] for i in range(case.n)]
    final = project(concat, case.W_O, case.b_O) if case.W_O is not None else concat
    return {"X_norm": X if case.norm is not None else None, "heads": heads, "concat": concat, "output": final,
            "positions": None if case.cross else positions}
