"""The backward worksheet's answer key: each cell's arithmetic with its operands as printed on the page.

Every line is one operation of core/gradients.py written with the printed numbers it reads (tables printed
before it, or the scenario's inputs), so a calculator gives the printed answer within one unit of its last
digit; edges/worksheet/backward/tables.py builds the tables these lines explain.
"""

from __future__ import annotations

from dataclasses import dataclass

from qkv_tui.core.scenario import Scenario
from qkv_tui.edges.worksheet.backward.mla_lines import KINDS as MLA_KINDS
from qkv_tui.edges.worksheet.backward.mla_lines import mla_line
from qkv_tui.edges.worksheet.backward.names import cell_name
from qkv_tui.edges.worksheet.backward.parts import part_sheets
from qkv_tui.edges.worksheet.backward.qk_all import KINDS as QK_ALL_KINDS
from qkv_tui.edges.worksheet.backward.qk_all import qk_all, qk_all_line
from qkv_tui.edges.worksheet.backward.state_lines import KINDS as LINEAR_KINDS
from qkv_tui.edges.worksheet.backward.state_lines import linear_line
from qkv_tui.teach.stages.printed import PrintedCells, Table, exact

Ref = tuple[str, int, int]  # (table key, row, col) of a printed operand


@dataclass(frozen=True)
class OperandKeys:
    """Where the backward lines find what they read, on this scenario's page."""

    sc: Scenario
    owners: list[int]  # query head -> the head whose section prints its K and V

    @property
    def out_name(self) -> str:
        return "final" if self.sc.W_O is not None else "output"

    @property
    def concat_name(self) -> str:
        return "concat"

    @property
    def q_used_name(self) -> str:
        return "Q'" if self.sc.rope is not None else ("Q̂" if self.sc.qk_norm is not None else "Q")

    @property
    def k_used_name(self) -> str:
        return "K'" if self.sc.rope is not None else ("K̂" if self.sc.qk_norm is not None else "K")

    def dq_names(self, h: int) -> tuple[str, str]:
        """The names of dQ at what is scored, then after RoPE is turned back."""
        rope, qk = self.sc.rope is not None, self.sc.qk_norm is not None
        return ("dQ'" if rope else ("dQ̂" if qk else "dQ"), "dQ̂" if qk else "dQ")

    def dk_names(self, h: int) -> tuple[str, str]:
        rope, qk = self.sc.rope is not None, self.sc.qk_norm is not None
        return ("dK'" if rope else ("dK̂" if qk else "dK"), "dK̂" if qk else "dK")

    def out(self, tables: dict[str, Table]) -> str:
        """The table of the final output: final, concat, or the one head's (gated) output."""
        if self.sc.W_O is not None:
            return "final"
        if "concat" in tables:
            return "concat"
        return "gated.0" if self.sc.heads[0].W_G is not None else "output.0"

    def concat(self, tables: dict[str, Table]) -> str:
        if "concat" in tables:
            return "concat"
        return "gated.0" if self.sc.heads[0].W_G is not None else "output.0"

    def start(self, h: int) -> int:
        """Head ``h``'s first column at Concat."""
        return sum(head.d_v for head in self.sc.heads[:h])

    def dJ(self, h: int, i: int, j: int) -> Ref:
        """The gradient at what Concat joins from head ``h``: its columns of dConcat (or of dO without W_O)."""
        return ("dConcat" if self.sc.W_O is not None else "dO", i, self.start(h) + j)

    def dO_h(self, tables: dict[str, Table], h: int, i: int, j: int) -> Ref:
        return (f"dOh.{h}", i, j) if f"dOh.{h}" in tables else self.dJ(h, i, j)

    def used(self, role: str, h: int) -> str:
        """Q or K as scored: turned, normalised, or as projected (K and V in their owner's section)."""
        g = h if role == "Q" else self.owners[h]
        if self.sc.rope is not None:
            return f"{role}_rot.{g}"
        if self.sc.qk_norm is not None:
            return f"{role}_norm.{g}"
        return f"{role}.{g}"

    def grad_at_projection(self, role: str, h: int) -> str:
        """The table of dQ (or dK) at Q = X̂·W_Q + b_Q."""
        r = role[-1]
        if self.sc.qk_norm is not None:
            return f"d{r}.{h}"
        return f"d{r}t.{h}" if self.sc.rope is not None else f"d{r}u.{h}"

    def turned(self, role: str, h: int) -> str:
        """The gradient at what RoPE turns (what QK-norm's backward reads)."""
        return f"d{role}t.{h}" if self.sc.rope is not None else f"d{role}u.{h}"

    @property
    def x_in(self) -> str:
        return "X_norm" if self.sc.norm is not None else "X"

    @property
    def x_kv(self) -> str:
        return "context_X" if self.sc.is_cross else self.x_in


def operand_keys(sc: Scenario, owners: list[int]) -> OperandKeys:
    return OperandKeys(sc, owners)


def _neg(text: str) -> str:
    return text[1:-1] if text.startswith("(-") else f"(-{text})"


def line(cells: PrintedCells, table: Table, i: int, j: int, answer: str) -> str:
    """The answer key's line for cell (i, j) of backward table ``table``."""
    sc = cells.sc
    ops = OperandKeys(sc, cells.owners)
    kind, _, suffix = table.key.partition(".")
    h = int(suffix) if suffix.isdigit() else 0
    g = cells.owners[h] if sc.heads else 0
    tok, keys = sc.labels, sc.key_labels
    tables = cells.tables

    def tx(ref: Ref) -> str:
        return cells.txt(*ref)

    def terms(pairs: list[tuple[Ref, Ref]]) -> str:
        return " + ".join(f"{tx(a)}·{tx(b)}" for a, b in pairs) or "0"

    def col_sum(key: str, col: int) -> str:
        rows = tables[key].values.shape[0]
        return " + ".join(tx((key, a, col)) for a in range(rows))

    def w(a: int, b: int) -> str:
        """A weight as printed; a masked one is the 0 it is."""
        return cells.txt(f"weights.{h}", a, b) if sc.allow[a, b] else "0"

    name = cell_name(table, i, j, (*sc.labels, *sc.key_labels))
    # a part's own tables (edges/worksheet/backward/parts.py): its module writes their lines
    own = next((sheet for sheet in part_sheets(sc) if kind in sheet.kinds), None)
    if own is not None:
        return own.line(cells, table, i, j, answer)
    if qk_all(sc) and kind in QK_ALL_KINDS:
        return qk_all_line(cells, table, i, j, answer)
    if sc.mla is not None and kind in MLA_KINDS:
        return mla_line(cells, table, i, j, answer)
    if sc.linear is not None and kind in LINEAR_KINDS and suffix:
        return linear_line(cells, table, h, i, j, answer, lambda a, b: ops.dO_h(tables, h, a, b),
                           lambda role: ops.used(role, h))
    if kind == "dO":
        out = ops.out(tables)
        return f"{name} = {ops.out_name} − target = {tx((out, i, j))} − {tx(('target', i, j))} = {answer}"
    if kind == "dConcat":
        W_O = tables["W_O"].values
        body = terms([(("dO", i, c), ("W_O", j, c)) for c in range(W_O.shape[1])])
        return f"{name} = dO[{tok[i]}]·W_O[{j}] = {body} = {answer}"
    if kind == "dW_O":
        c = ops.concat(tables)
        body = terms([((c, a, i), ("dO", a, j)) for a in range(sc.n)])
        return f"{name} = Σ concat[·,{i}]·dO[·,{j}] = {body} = {answer}"
    if kind in ("db_O", "db_Q", "db_K", "db_V"):
        src = {"db_O": "dO", "db_Q": ops.grad_at_projection("Q", h), "db_K": ops.grad_at_projection("K", h),
               "db_V": f"dV.{h}"}[kind]
        return f"{name} = Σ {tables[src].name}[·,{j}] = {col_sum(src, j)} = {answer}"
    if kind == "dOh":
        return f"{name} = dJ·g = {tx(ops.dJ(h, i, j))}·{tx((f'gate.{h}', i, j))} = {answer}"
    if kind == "dz":
        gate = tx((f"gate.{h}", i, j))
        return (f"{name} = dJ·output·g·(1 − g) = {tx(ops.dJ(h, i, j))}·{tx((f'output.{h}', i, j))}·{gate}·(1 − {gate})"
                f" = {answer}")
    if kind in ("dW_G", "dW_Q", "dW_K", "dW_V"):
        x = ops.x_kv if kind in ("dW_K", "dW_V") else ops.x_in
        src = {"dW_G": f"dz.{h}", "dW_Q": ops.grad_at_projection("Q", h), "dW_K": ops.grad_at_projection("K", h),
               "dW_V": f"dV.{h}"}[kind]
        body = terms([((x, a, i), (src, a, j)) for a in range(tables[src].values.shape[0])])
        return f"{name} = Σ {tables[x].name}[·,{i}]·{tables[src].name}[·,{j}] = {body} = {answer}"
    if kind == "dV":
        body = " + ".join(f"{w(a, i)}·{tx(ops.dO_h(tables, h, a, j))}" for a in range(sc.n))
        return f"{name} = Σ weights[·,{keys[i]}]·dO_h[·,{j}] = {body} = {answer}"
    if kind == "dP":
        body = terms([(ops.dO_h(tables, h, i, c), (f"V.{g}", j, c)) for c in range(sc.heads[h].d_v)])
        return f"{name} = dO_h[{tok[i]}]·V[{keys[j]}] = {body} = {answer}"
    if kind == "D":
        body = terms([(ops.dO_h(tables, h, i, c), (f"output.{h}", i, c)) for c in range(sc.heads[h].d_v)])
        return f"{name} = Σ dO_h[{tok[i]}] ⊙ output[{tok[i]}] = {body} = {answer}"
    if kind == "dS":
        return f"{name} = weights·(dP − D) = {w(i, j)}·({tx((f'dP.{h}', i, j))} − {tx((f'D.{h}', i, 0))}) = {answer}"
    if kind == "psink":
        body = " − ".join([tx((f"weights.{h}", i, b)) for b in range(sc.m) if sc.allow[i, b]])
        return f"{name} = 1 − Σ weights[{tok[i]}] = 1 − {body} = {answer}"
    if kind == "dsink":
        body = terms([((f"psink.{h}", a, 0), (f"D.{h}", a, 0)) for a in range(sc.n)])
        return f"dsink = −Σ p_sink·D = −({body}) = {answer}"
    if kind == "dcap":
        c = exact(float(sc.heads[h].softcap or 0.0))
        s = tx((f"scaled.{h}", i, j))
        return (f"{name} = dS·(1 − tanh²(scaled / c)) = {tx((f'dS.{h}', i, j))}·(1 − tanh({s} / {c})·tanh({s} / {c}))"
                f" = {answer}")
    if kind == "dscores":
        src = f"dcap.{h}" if f"dcap.{h}" in tables else f"dS.{h}"
        return f"{name} = {tables[src].name} / scale = {tx((src, i, j))} / {_divisor(sc, h)} = {answer}"
    if kind == "dQu":
        K = ops.used("K", h)
        body = terms([((f"dscores.{h}", i, b), (K, b, j)) for b in range(sc.m) if sc.allow[i, b]])
        return f"{name} = Σ dscores[{tok[i]},·]·{tables[K].name}[·,{j}] = {body} = {answer}"
    if kind == "dKu":
        Q = ops.used("Q", h)
        body = terms([((f"dscores.{h}", a, i), (Q, a, j)) for a in range(sc.n) if sc.allow[a, i]])
        return f"{name} = Σ dscores[·,{keys[i]}]·{tables[Q].name}[·,{j}] = {body} = {answer}"
    if kind in ("dQt", "dKt"):
        return _turn_back(cells, table, kind[1], h, i, j, answer)
    if kind in ("qroot", "kroot"):
        role = kind[0].upper()
        ms = tx((f"{kind[0]}ms.{h}", i, 0))
        assert sc.qk_norm is not None
        return f"{name} = √(ms_{role} + eps) = √({ms} + {float(sc.qk_norm.eps)!r}) = {answer}"
    if kind in ("qhat", "khat"):
        role = kind[0].upper()
        return f"{name} = {role} / r_{role} = {tx((f'{role}.{h}', i, j))} / {tx((f'{kind[0]}root.{h}', i, 0))} = {answer}"
    if kind in ("qm", "km"):
        role = kind[0].upper()
        dY, hat = ops.turned(role, h), f"{kind[0]}hat.{g if role == 'K' else h}"
        d_k = sc.heads[h].d_k
        body = " + ".join(f"{tx((dY, i, c))}·{tx(('gamma_' + kind[0], 0, c))}·{tx((hat, i, c))}" for c in range(d_k))
        return f"{name} = mean(d{role}̂ ⊙ γ ⊙ x̂) = ({body}) / {d_k} = {answer}"
    if kind in ("dQ", "dK"):
        role = kind[1]
        low = role.lower()
        dY, o = ops.turned(role, h), (g if role == "K" else h)
        return (f"{name} = (d{role}̂·γ − x̂·m) / r = ({tx((dY, i, j))}·{tx(('gamma_' + low, 0, j))} − "
                f"{tx((f'{low}hat.{o}', i, j))}·{tx((f'{low}m.{h}', i, 0))}) / {tx((f'{low}root.{o}', i, 0))} = {answer}")
    if kind in ("dgamma_q", "dgamma_k") and suffix:
        role = kind[-1].upper()
        dY, hat = ops.turned(role, h), f"{kind[-1]}hat.{g if role == 'K' else h}"
        body = terms([((dY, a, j), (hat, a, j)) for a in range(tables[hat].values.shape[0])])
        return f"{name} = Σ d{role}̂[·,{j}]·x̂_{role}[·,{j}] = {body} = {answer}"
    if kind in ("dgamma_q", "dgamma_k"):
        parts = " + ".join(tx((f"{kind}.{x}", 0, j)) for x in range(len(sc.heads)))
        return f"{name} = Σ over the heads = {parts} = {answer}"
    if kind.startswith("kv"):
        what = kind[2:]
        readers = [x for x in range(len(sc.heads)) if cells.owners[x] == h]
        parts = " + ".join(tx((f"{what}.{x}", i, j)) for x in readers)
        return f"{name} = Σ over its readers = {parts} = {answer}"
    if kind == "dX_in":
        what = "dQ·W_Qᵀ" + ("" if sc.is_cross else " + dK·W_Kᵀ + dV·W_Vᵀ")
        what += " + dz·W_Gᵀ" if any(head.W_G is not None for head in sc.heads) else ""
        every = ", every head" if len(sc.heads) > 1 else ""
        return f"{name} = {what} at [{tok[i]},{j}]{every} = {_paths(cells, ops, i, j)} = {answer}"
    return _norm_line(cells, kind, name, i, j, answer)


def _divisor(sc: Scenario, h: int) -> str:
    head = sc.heads[h]
    return f"√{head.d_k}" if sc.scale is None else exact(float(sc.scale))


def _paths(cells: PrintedCells, ops: OperandKeys, i: int, c: int) -> str:
    """dX̂[i,c]: every path into X̂ (each head's Q, K and V projections and gate), one product per term."""
    sc = cells.sc
    pairs: list[tuple[Ref, Ref]] = []
    for h, head in enumerate(sc.heads):
        g = cells.owners[h]
        dq = ops.grad_at_projection("Q", h)
        pairs += [((dq, i, k), (f"W_Q.{h}", c, k)) for k in range(head.d_k)]
        if not sc.is_cross:
            dk = ops.grad_at_projection("K", h)
            pairs += [((dk, i, k), (f"W_K.{g}", c, k)) for k in range(head.d_k)]
            pairs += [((f"dV.{h}", i, k), (f"W_V.{g}", c, k)) for k in range(head.d_v)]
        if head.W_G is not None:
            pairs += [((f"dz.{h}", i, k), (f"W_G.{h}", c, k)) for k in range(head.d_v)]
    return " + ".join(f"{cells.txt(*a)}·{cells.txt(*b)}" for a, b in pairs)


def _turn_back(cells: PrintedCells, table: Table, role: str, h: int, i: int, j: int, answer: str) -> str:
    """RoPE read backwards: a = a'·cos + b'·sin, b = −a'·sin + b'·cos (the rotation by the opposite angle)."""
    sc = cells.sc
    assert sc.rope is not None
    d_k = sc.heads[h].d_k
    src = f"d{role}u.{h}"
    name = f"{table.name}[{table.rows[i]},{j}]"
    found = next(((k, pair) for k, pair in enumerate(sc.rope.pairs(d_k)) if j in pair), None)
    if found is None:  # partial rotary: passed through
        return f"{name} = {cells.txt(src, i, j)} = {answer}"
    k, (a, b) = found
    trig = f"trig.{d_k}"
    # a K row's position is its key's; the cos/sin table is the queries' rows, the same tokens in self-attention
    cos, sin = cells.txt(trig, i, 2 * k), cells.txt(trig, i, 2 * k + 1)
    va, vb = cells.txt(src, i, a), cells.txt(src, i, b)
    if j == a:
        return f"{name} = {role}'a·cos + {role}'b·sin = {va}·{cos} + {vb}·{sin} = {answer}"
    return f"{name} = −{role}'a·sin + {role}'b·cos = -{va}·{sin} + {vb}·{cos} = {answer}"


def _norm_line(cells: PrintedCells, kind: str, name: str, i: int, j: int, answer: str) -> str:
    sc = cells.sc
    assert sc.norm is not None, kind
    tx = cells.txt
    width = sc.X.shape[1]
    layer = sc.norm.kind == "layer"
    if kind == "xroot":
        spread = tx("stats", i, 1 if layer else 0)
        return f"{name} = √({'var' if layer else 'ms'} + eps) = √({spread} + {float(sc.norm.eps)!r}) = {answer}"
    if kind == "xhat":
        if layer:
            return f"{name} = (x − mean) / r = ({tx('X', i, j)} − {tx('stats', i, 0)}) / {tx('xroot', i, 0)} = {answer}"
        return f"{name} = x / r = {tx('X', i, j)} / {tx('xroot', i, 0)} = {answer}"
    if kind == "xm":
        body = " + ".join(f"{tx('dX_in', i, c)}·{tx('gamma', 0, c)}·{tx('xhat', i, c)}" for c in range(width))
        return f"{name} = mean(dX̂ ⊙ γ ⊙ x̂) = ({body}) / {width} = {answer}"
    if kind == "xgbar":
        body = " + ".join(f"{tx('dX_in', i, c)}·{tx('gamma', 0, c)}" for c in range(width))
        return f"{name} = mean(dX̂ ⊙ γ) = ({body}) / {width} = {answer}"
    if kind == "dX":
        gbar = f" − {tx('xgbar', i, 0)}" if layer else ""
        return (f"{name} = (dX̂·γ − x̂·m{' − ḡ' if layer else ''}) / r = ({tx('dX_in', i, j)}·{tx('gamma', 0, j)} − "
                f"{tx('xhat', i, j)}·{tx('xm', i, 0)}{gbar}) / {tx('xroot', i, 0)} = {answer}")
    if kind == "dgamma":
        body = " + ".join(f"{tx('dX_in', a, j)}·{tx('xhat', a, j)}" for a in range(sc.n))
        return f"{name} = Σ dX̂[·,{j}]·x̂[·,{j}] = {body} = {answer}"
    if kind == "dbeta":
        return f"{name} = Σ dX̂[·,{j}] = {' + '.join(tx('dX_in', a, j) for a in range(sc.n))} = {answer}"
    raise KeyError(kind)
