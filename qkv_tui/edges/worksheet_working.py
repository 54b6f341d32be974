"""A worksheet's answer key: the arithmetic of one cell, written with the operands as printed on the page.

Every line reads ``name[row,col] = what it is = the printed numbers = the answer``; typed into a
calculator, the numbers give the answer within one unit of its last digit, because the answer was
computed from exactly those numbers (:mod:`qkv_tui.edges.worksheet_chain`).
"""

from __future__ import annotations

import math

from qkv_tui.core.fmt import fmt
from qkv_tui.core.scenario import Scenario
from qkv_tui.edges.worksheet_chain import Table, exact, kv_owners, pairs
from qkv_tui.teach import stages


class Working:
    """The arithmetic of one cell, written with the printed operands."""

    def __init__(self, sc: Scenario, tables: dict[str, Table], decimals: int) -> None:
        self.sc = sc
        self.tables = tables
        self.d = decimals
        self.owners = kv_owners(sc)

    def txt(self, key: str, row: int, col: int) -> str:
        """A printed cell as an operand: negatives in parentheses, ``1·(-2)``."""
        text = self.tables[key].text(row, col, self.d)
        return f"({text})" if text.startswith("-") else text

    def dot(self, left: str, row: int, right: str, col: int) -> str:
        width = self.tables[left].values.shape[1]
        return " + ".join(f"{self.txt(left, row, c)}·{self.txt(right, c, col)}" for c in range(width))

    def bias(self, key: str, col: int) -> str:
        """`` + 0.5`` when the projection has a bias vector on the page, else nothing."""
        return f" + {self.txt(key, 0, col)}" if key in self.tables else ""

    def line(self, table: Table, i: int, j: int) -> str:
        sc = self.sc
        h = table.head
        s = f".{h}" if h is not None else ""
        answer = table.text(i, j, self.d)
        name = table.name
        q = (sc.key_labels if name in ("K", "V", "K'") else sc.labels)[i]
        if table.key == "stats":
            return self.stats(i, j, answer)
        if name == "X̂":
            return self.norm(i, j, answer)
        if name in ("Q", "K", "V"):
            if name == "Q":
                source, xs = ("X_norm", "X̂") if "X_norm" in self.tables else ("X", "X")
            elif sc.is_cross:
                source, xs = "context_X", "X_ctx"
            else:
                source, xs = ("X_norm", "X̂") if "X_norm" in self.tables else ("X", "X")
            b_key = f"b_{name}{s}"
            plus = f" + b_{name}[{j}]" if b_key in self.tables else ""
            return (f"{name}[{q},{j}] = {xs}[{q}]·W_{name}[:,{j}]{plus}"
                    f" = {self.dot(source, i, f'W_{name}{s}', j)}{self.bias(b_key, j)} = {answer}")
        if name in ("Q'", "K'"):
            return self.rotated(table, i, j, answer)
        assert h is not None
        g = f".{self.owners[h]}"
        if name == "scores":
            k = sc.key_labels[j]
            rope = sc.rope is not None
            qk, kk = (f"Q_rot{s}", f"K_rot{g}") if rope else (f"Q{s}", f"K{g}")
            width = self.tables[qk].values.shape[1]
            terms = " + ".join(f"{self.txt(qk, i, c)}·{self.txt(kk, j, c)}" for c in range(width))
            mark = "'" if rope else ""
            return f"scores[{q},{k}] = Q{mark}[{q}]·K{mark}[{k}] = {terms} = {answer}"
        if name == "scaled":
            return self.scaled(h, i, j, answer)
        if name == "weights":
            return self.softmax(h, i, j, answer)
        if name == "output":
            return f"output[{q},{j}] = weights[{q}]·V[:,{j}] = {self.dot(f'weights{s}', i, f'V{g}', j)} = {answer}"
        return stages.spec(table.stage).worksheet_line(self, table, i, j, answer)  # a stage's own table

    def final(self, i: int, j: int) -> str:
        table = self.tables["final"]
        q = self.sc.labels[i]
        # with one head, the output itself is what W_O multiplies (no concat table on the page)
        source, label = ("concat", "concat") if "concat" in self.tables else ("output.0", "output")
        plus = f" + b_O[{j}]" if "b_O" in self.tables else ""
        return (f"final[{q},{j}] = {label}[{q}]·W_O[:,{j}]{plus} = {self.dot(source, i, 'W_O', j)}{self.bias('b_O', j)}"
                f" = {table.text(i, j, self.d)}")

    # --- Norm ------------------------------------------------------------------------------

    def stats(self, i: int, j: int, answer: str) -> str:
        """``ms[I] = (1·1 + 0·0 + 1·1 + 0·0) / 4 = 0.500``, ``mean[I] = …``, ``var[I] = ((1 − 0.500)·(1 − 0.500) + …) / 4``."""
        token = self.sc.labels[i]
        width = self.tables["X"].values.shape[1]
        xs = [self.txt("X", i, c) for c in range(width)]
        column = self.tables["stats"].cols[j]
        if column == "ms":
            terms = " + ".join(f"{x}·{x}" for x in xs)
            return f"ms[{token}] = (X[{token},0]² + … + X[{token},{width - 1}]²) / {width} = ({terms}) / {width} = {answer}"
        if column == "mean":
            terms = " + ".join(xs)
            return f"mean[{token}] = (X[{token},0] + … + X[{token},{width - 1}]) / {width} = ({terms}) / {width} = {answer}"
        mean = self.txt("stats", i, 0)
        terms = " + ".join(f"({x} − {mean})·({x} − {mean})" for x in xs)
        first, last = f"(X[{token},0] − mean[{token}])²", f"(X[{token},{width - 1}] − mean[{token}])²"
        return f"var[{token}] = ({first} + … + {last}) / {width} = ({terms}) / {width} = {answer}"

    def norm(self, i: int, j: int, answer: str) -> str:
        """``X̂[I,2] = X[I,2] / √(ms[I] + eps)·γ[2] = 1 / √(0.500 + 1e-05)·1 = 1.414`` (LayerNorm: centred, + β)."""
        sc = self.sc
        assert sc.norm is not None
        token = sc.labels[i]
        eps = repr(float(sc.norm.eps))
        x, gamma = self.txt("X", i, j), self.txt("gamma", 0, j)
        beta = f" + {self.txt('beta', 0, j)}" if "beta" in self.tables else ""
        beta_sym = f" + β[{j}]" if beta else ""
        if sc.norm.kind == "rms":
            ms = self.txt("stats", i, 0)
            return (f"X̂[{token},{j}] = X[{token},{j}] / √(ms[{token}] + eps)·γ[{j}]{beta_sym}"
                    f" = {x} / √({ms} + {eps})·{gamma}{beta} = {answer}")
        mean, var = self.txt("stats", i, 0), self.txt("stats", i, 1)
        return (f"X̂[{token},{j}] = (X[{token},{j}] − mean[{token}]) / √(var[{token}] + eps)·γ[{j}]{beta_sym}"
                f" = ({x} − {mean}) / √({var} + {eps})·{gamma}{beta} = {answer}")

    # --- Rotate ----------------------------------------------------------------------------

    def rotated(self, table: Table, i: int, j: int, answer: str) -> str:
        """``Q'[love,0] = Q[love,0]·cos(1·θ₀) − Q[love,1]·sin(1·θ₀) = 0·0.540 − 2·0.841 = -1.683``."""
        sc = self.sc
        assert sc.rope is not None and sc.positions is not None and table.head is not None
        name = table.name[0]
        source = f"{name}.{table.head}"
        d_k = table.values.shape[1]
        found = next((k, pair) for k, pair in enumerate(pairs(sc.rope.layout, d_k)) if j in pair)
        k, (a, b) = found
        token = sc.labels[i]
        angle = f"{sc.positions[i]}·θ{_sub(k)}"
        trig = f"trig.{d_k}"
        cos, sin = self.txt(trig, i, 2 * k), self.txt(trig, i, 2 * k + 1)
        va, vb = self.txt(source, i, a), self.txt(source, i, b)
        if j == a:
            return (f"{name}'[{token},{a}] = {name}[{token},{a}]·cos({angle}) − {name}[{token},{b}]·sin({angle})"
                    f" = {va}·{cos} − {vb}·{sin} = {answer}")
        return (f"{name}'[{token},{b}] = {name}[{token},{a}]·sin({angle}) + {name}[{token},{b}]·cos({angle})"
                f" = {va}·{sin} + {vb}·{cos} = {answer}")

    # --- Scale, Softmax --------------------------------------------------------------------

    def scaled(self, h: int, i: int, j: int, answer: str) -> str:
        sc = self.sc
        q, k = sc.labels[i], sc.key_labels[j]
        divisor = f"√{sc.heads[h].d_k}" if sc.scale is None else exact(sc.scale)
        score = self.txt(f"scores.{h}", i, j)
        if "slopes" not in self.tables:
            return f"scaled[{q},{k}] = {score} / {divisor} = {answer}"
        assert sc.positions is not None
        slope = self.txt("slopes", 0, h)
        pi, pj = sc.positions[i], sc.positions[j]
        return (f"scaled[{q},{k}] = scores[{q},{k}] / {divisor} + slope·(j − i)"
                f" = {score} / {divisor} + {slope}·({pj} − {pi}) = {answer}")

    def softmax(self, h: int, i: int, j: int, answer: str) -> str:
        sc = self.sc
        key = f"scaled.{h}"
        scaled = self.tables[key]
        allowed = [c for c in range(sc.m) if sc.allow[i, c]]
        row = [float(scaled.values[i, c]) for c in allowed]
        sink = sc.heads[h].sink
        top = max(row)
        top_text = self.txt(key, i, allowed[row.index(top)])
        if sink is not None and sink > top:  # the sink is the largest logit: it is what is subtracted
            top, top_text = sink, f"({exact(sink)})" if sink < 0 else exact(sink)
        exps = [math.exp(v - top) for v in row]
        sink_term = ""
        if sink is not None:
            sink_text = f"({exact(sink)})" if sink < 0 else exact(sink)
            sink_term = f" + e^({sink_text} − {top_text})"
            exps.append(math.exp(sink - top))
        total = sum(exps)
        # one decimal more than the page for e and Σ: the sum is at least 1 (e^0 of the largest), so their
        # quotient stays within a unit of the answer
        extra = self.d + 1

        def power(c: int) -> str:
            return f"e^({self.txt(key, i, c)} − {top_text})"

        terms = " + ".join(power(c) for c in allowed) + sink_term
        mine = math.exp(float(scaled.values[i, j]) - top)
        symbolic = " = e^(s − m) / (Σ e^(s − m) + e^(sink − m))" if sink is not None else ""
        return (f"weights[{sc.labels[i]},{sc.key_labels[j]}]{symbolic} = {power(j)} / ({terms})"
                f" = {fmt(mine, False, extra)} / {fmt(total, False, extra)} = {answer}")


def _sub(i: int) -> str:
    return "".join("₀₁₂₃₄₅₆₇₈₉"[int(ch)] for ch in str(i))
