"""The arithmetic of the modern stages, one cell at a time, checkable on a calculator.

The Norm and Rotate stages, the ``+ b`` term of a projection, the ALiBi ``+ slope·(j − i)`` of a
scaled score and the attention sink's extra softmax column. Each line keeps the rule of
:mod:`qkv_tui.teach.arith`: every ``=`` recomputed from the numbers on its left gives the number
on its right within one unit of its last digit; operands get guard digits where they need them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal, localcontext

import numpy as np

from qkv_tui.core.engine import Computation, HeadResult
from qkv_tui.core.fmt import BIG, fmt, operand
from qkv_tui.teach.arith import SIGNIFICANT, Numbers, agrees, dot_at, elide, hidden_terms, shown, significant
from qkv_tui.teach.arith import tries as _places
from qkv_tui.teach.handcalc import round_to

NORM_MEANING = (
    "Normalise each token's row of X before attention (pre-norm, as LLaMA, Mistral and Qwen do)."
    " RMSNorm divides each cell by the row's root mean square, √(mean(x²) + eps), then multiplies by a"
    " learned gain γ; LayerNorm first subtracts the row's mean, divides by √(variance + eps), then"
    " multiplies by γ and adds β. Every token arrives at the projections at the same scale."
)
ROTATE_MEANING = (
    "RoPE turns Q and K (never V) by position: the dimensions go in pairs, and pair i of a token at"
    " position p turns by the angle p·θᵢ, with θᵢ = base^(−2i/dₖ) (the first pair fastest). Because both"
    " vectors turn by their own position, position enters the dot product q_m·k_n only through the"
    " distance m − n (RoFormer, Su et al. §3.2): a score depends on the two vectors and on how far apart"
    " the tokens are, not on where they sit. Which dimensions pair up is the layout: interleaved pairs"
    " neighbours (0,1), (2,3) (RoFormer, Meta's LLaMA code); half pairs i with i + dₖ/2 (GPT-NeoX's"
    " rotate_half, which Hugging Face's LLaMA code uses)."
)


# Plain-words notes on each variant, for the app's help and notes screens
VARIANT_NOTES = (
    ("Pre-norm ([norm])",
     "Modern models rescale each token's row of X before attention, so no token shouts louder than another."
     " RMSNorm divides by the root mean square (LLaMA, Mistral, Qwen); LayerNorm also centres the row and"
     " adds a shift (GPT-2). The Norm stage works each cell: x / √(mean of squares + eps) · γ."),
    ("Biases (b_Q, b_K, b_V, b_O)",
     "Some models (GPT-2, Qwen2) add a learned number to every column of a projection: Q = X·W_Q + b_Q."
     " Each projected cell then ends in '+ b'."),
    ("RoPE ([rope])",
     "Instead of adding positions to X, RoPE turns each pair of Q and K dimensions by an angle that grows"
     " with the token's position. A rotation keeps lengths, and when both q and k are turned, position"
     " reaches their dot product only through the difference of the angles (Su et al., RoFormer §3.2): a"
     " score depends on the two vectors and on how far apart the tokens are, not on where they sit."
     " Libraries pair dimensions differently: interleaved (0,1), (2,3) in the RoFormer paper and Meta's"
     " LLaMA code; half (0, d/2), … in GPT-NeoX and Hugging Face's LLaMA code. Hugging Face's LLaMA"
     " checkpoints are Meta's weights with each head's W_Q and W_K columns permuted (evens first, then odds;"
     " its convert_llama_weights_to_hf.py), so each"
     " layout gives the same scores with its own weights; the same weights in the wrong layout give wrong"
     " numbers (the rope_layouts scenario shows both)."),
    ("Grouped-query and multi-query attention (num_kv_heads)",
     "Several query heads can share one Key/Value head (Ainslie et al. 2023): each still asks its own"
     " question, but they look things up in the same K and V. The KV cache shrinks by num_heads /"
     " num_kv_heads: 8 times in LLaMA 2 70B (64 query heads, 8 K/V heads), 4 times in Mistral 7B (32 and 8);"
     " LLaMA 2 7B and 13B use plain multi-head attention. num_kv_heads = 1 is multi-query attention"
     " (Shazeer 2019)."),
    ("ALiBi ([alibi])",
     "No position vectors at all (Press et al. 2022): each head adds slope·(j − i) to its scaled scores, a"
     " penalty that grows the further back a key is. Steep heads favour nearby keys, gentle heads reach further."),
    ("Sliding windows (kind = \"sliding\")",
     "A causal mask that also forgets: each token sees itself and the window − 1 tokens before it, so the"
     " KV cache never holds more than the window. Libraries count the window differently. Here a window W"
     " means 0 ≤ i − j < W: W keys, the query's own included, as Hugging Face transformers and gpt-oss count"
     " their sliding_window. FlashAttention writes the same window as window_size = (W − 1, 0); in the"
     " Mistral paper position i sees i − W … i, so its window W holds one key more."),
    ("What masked cells hold",
     "Here a masked score is −∞, as PyTorch's scaled_dot_product_attention makes it from a boolean mask;"
     " Hugging Face transformers' eager attention adds torch.finfo(dtype).min instead, and the original"
     " BERT code adds −10000. While a row keeps one allowed key, all three give masked keys weight 0. A row"
     " with every key masked is where they part: a plain softmax of −∞ everywhere is 0/0 = NaN (PyTorch"
     " 2.13's scaled_dot_product_attention returns a zero row instead), finfo.min gives every key the same"
     " weight, and −10000 gives, to float32 rounding, the row's unmasked softmax. This app refuses such a"
     " row."),
    ("Attention sinks (sink, sinks)",
     "Softmax must hand out 100% of a row. Trained models often park the spare share on the first tokens"
     " (Xiao et al. 2023 named them attention sinks); gpt-oss instead gives each head one extra learned"
     " logit that takes part in the softmax and is then thrown away, so a head can put its attention"
     " 'nowhere' and its weights sum to less than 1."),
)


def eps_text(eps: float) -> str:
    """eps as a calculator takes it: ``1e-05``, ``0.5``."""
    return f"{eps:g}"


# --- Norm ----------------------------------------------------------------------------------


def norm_lines(comp: Computation, row: int, col: int, token: str, d: int, hand: int | None) -> tuple[str, tuple[str, ...]]:
    """``X̂[I,2] = X[I,2] / √(ms + eps)·γ[2] = 1 / √(0.500 + 1e-05)·1 = 1.414`` and the row's statistics."""
    sc = comp.scenario
    norm = sc.norm
    result_norm = comp.norm
    assert norm is not None and result_norm is not None
    x_row = sc.X[row]
    x_int = bool(np.all(x_row == np.round(x_row)))
    value = float(result_norm.X_norm[row, col])
    result = fmt(value, False, d)
    gamma = float(norm.gamma[col])
    beta = float(norm.beta[col]) if norm.beta is not None else None
    layer = norm.kind == "layer"
    eps = eps_text(norm.eps)
    g_int = gamma == round(gamma)
    symbolic = (f"X̂[{token},{col}] = (X[{token},{col}] − mean) / √(var + eps)·γ[{col}]" if layer
                else f"X̂[{token},{col}] = X[{token},{col}] / √(ms + eps)·γ[{col}]")
    if beta is not None:
        symbolic += f" + β[{col}]"
    lines: tuple[str, tuple[str, ...]] = ("", ())
    # the mean square is rarely whole: it may need guard digits (by hand, every number is as written down)
    for p in _places(d, hand is not None):
        xs = [fmt(float(x), x_int, p) for x in x_row]
        mean_t = fmt(float(result_norm.mean[row]), False, p)
        spread_t = fmt(float(result_norm.spread[row]), False, p)
        root_t = fmt(float(result_norm.root[row]), False, p)
        x_t = operand(float(x_row[col]), x_int, p)
        if hand is not None and not layer:  # by hand the cell is written down rounded, as the hand computation does
            x_t = operand(_hround(float(x_row[col]), hand), x_int, p)
        g_t = operand(gamma, g_int, p)
        b_t = f" + {operand(beta, beta == round(beta), p)}" if beta is not None else ""
        centred = f"({x_t} − {_paren(mean_t)})" if layer else x_t
        work = f"{centred} / √({spread_t} + {eps})·{g_t}{b_t}"
        steps = [work]
        if hand is not None:  # by hand the centred value and the root are written down first
            c_t = fmt(_hround(shown(x_t) - shown(mean_t), hand), False, p) if layer else x_t
            steps.append(f"{c_t} / {root_t}·{g_t}{b_t}")
        calc = ((shown(x_t) - (shown(mean_t) if layer else 0.0)) / math.sqrt(shown(spread_t) + norm.eps)
                * shown(g_t) + (shown(b_t[3:]) if beta is not None else 0.0))
        if layer:
            m_t, mean_v = _paren(mean_t), _number(mean_t)

            def centred_square(v: Decimal, m: Decimal = mean_v) -> Decimal:
                return (v - m) * (v - m)

            terms = _sum_text(xs, _paren, lambda v: v, p)
            mean_line = f"mean({token}) = ({terms}) / {len(x_row)} = {mean_t}"
            def centred_text(t: str, m: str = m_t) -> str:
                return f"({t} − {m})·({t} − {m})"

            squares = _sum_text(xs, centred_text, centred_square, p)
            spread_line = f"var({token}) = ({squares}) / {len(x_row)} = {spread_t}"
            stats_ok = (agrees(_mean_of(xs, lambda v: v), mean_t) and agrees(_mean_of(xs, centred_square), spread_t))
            stats: tuple[str, ...] = (mean_line, spread_line)
        else:
            squares = _sum_text(xs, lambda t: f"{_paren(t)}·{_paren(t)}", lambda v: v * v, p)
            stats = (f"ms({token}) = mean of squares = ({squares}) / {len(x_row)} = {spread_t}",)
            stats_ok = agrees(_mean_of(xs, lambda v: v * v), spread_t)
        root_line = f"√({spread_t} + {eps}) = {root_t}"
        lines = (f"{symbolic} = {' = '.join(steps)} = {result}", (*stats, root_line))
        if stats_ok and agrees(calc, result) and agrees(math.sqrt(shown(spread_t) + norm.eps), root_t):
            break
    return lines


def _number(text: str) -> Decimal:
    """A shown number as a calculator takes it, exactly (``(-0.841)`` → -0.841, ``1.000e+154``)."""
    return Decimal(text.strip("() ").replace("−", "-"))


def _mean_of(texts: list[str], term: Callable[[Decimal], Decimal]) -> float:
    """The mean of ``term`` of the shown numbers, worked as a calculator would: in decimal, so that squares of
    1e154 (past float64, not past a calculator) add up before the mean brings them back in range."""
    with localcontext() as ctx:
        ctx.prec = 60
        return float(sum((term(_number(t)) for t in texts), Decimal(0)) / len(texts))


def _sum_text(texts: list[str], item: Callable[[str], str], value: Callable[[Decimal], Decimal], p: int) -> str:
    """``a + b + …``: each shown number as ``item`` writes it (``x·x``); a sum too long for a line keeps its
    ends, as the Project's sums do, and shows what the hidden terms (``value`` of each) add up to at ``p``
    places, so the line can still be redone: ``0.5·0.5 + … 120 more, Σ = 83.210 … + 1.7·1.7``."""
    hidden = hidden_terms(len(texts))
    total = None
    if hidden:
        with localcontext() as ctx:
            ctx.prec = 60
            total = _decimal_text(sum((value(_number(texts[i])) for i in hidden), Decimal(0)), p)
    return elide([item(t) for t in texts], " + ", total)


def _decimal_text(value: Decimal, p: int) -> str:
    """A decimal written as :func:`fmt` writes a float at ``p`` places (scientific from 1e6 on), any size."""
    text = f"{value:.{p}e}" if abs(value) >= BIG else f"{value:.{p}f}"
    if text.startswith("-") and text.lstrip("-").strip("0.") == "":
        return text.lstrip("-")
    return text.replace("E", "e")


# --- Project: the + b term -------------------------------------------------------------------


def dot_bias_line(a: Numbers, b: Numbers, bias: float, a_int: bool, b_int: bool, result: str,
                  decimals: int, hand: int | None) -> str:
    """``1·1 + 0·0 + 0.5 = 1.5``: the dot product, then the bias, with guard digits as needed."""
    bias_int = bias == round(bias)
    text = ""
    for p in _places(decimals, a_int, b_int, bias_int):
        sides, total, steps = dot_at(a, b, a_int, b_int, p, hand)
        bt = operand(bias, bias_int, p)
        sides = [f"{s} + {bt}" for s in sides]
        text = " = ".join([*sides, result])
        # by hand the last side is a plain sum of numbers as written: at the result's decimals it must give
        # the result exactly (a shown -1.4 standing for a bias of -1.45 would be off by the hidden 0.05)
        if steps and agrees(total + shown(bt), result, exact=hand is not None and p <= decimals):
            break
    return text


# --- Rotate ------------------------------------------------------------------------------------


def rotate_lines(comp: Computation, h: int, target: str, row: int, col: int, d: int,
                 hand: int | None) -> tuple[float, str, tuple[str, ...]]:
    """One rotated cell: ``Q'[love,0] = Q[love,0]·cos(1·θ₀) − Q[love,1]·sin(1·θ₀) = 0·0.540 − 2·0.841 = -1.683``."""
    sc = comp.scenario
    rope = sc.rope
    head = comp.heads[h]
    assert rope is not None and sc.positions is not None
    source = head.Q if target == "Q_rot" else head.K
    rotated = head.Q_rot if target == "Q_rot" else head.K_rot
    assert rotated is not None
    name = target[0]
    labels = sc.labels if name == "Q" else sc.key_labels
    token = labels[row]
    d_k = head.d_k
    pairs = rope.pairs(d_k)
    i = next(k for k, (a, b) in enumerate(pairs) if col in (a, b))
    a, b = pairs[i]
    pos = sc.positions[row]
    theta = rope.theta(i, d_k)
    angle = pos * theta
    value = float(rotated[row, col])
    result = fmt(value, False, d)
    first = col == a
    sym_angle = f"{pos}·θ{_sub(i)}"
    if first:
        symbolic = f"{name}'[{token},{a}] = {name}[{token},{a}]·cos({sym_angle}) − {name}[{token},{b}]·sin({sym_angle})"
    else:
        symbolic = f"{name}'[{token},{b}] = {name}[{token},{a}]·sin({sym_angle}) + {name}[{token},{b}]·cos({sym_angle})"
    src_int = bool(np.all(source == np.round(source)))
    text = ""
    details: tuple[str, ...] = ()
    for p in _places(d, hand is not None):
        va, vb = operand(float(source[row, a]), src_int, p), operand(float(source[row, b]), src_int, p)
        if hand is not None:  # by hand cos and sin are written down rounded, and so is each product
            c, s = _hround(math.cos(angle), hand), _hround(math.sin(angle), hand)
        else:
            c, s = math.cos(angle), math.sin(angle)
        ct, st = operand(c, False, p), operand(s, False, p)
        if first:
            work = f"{va}·{ct} − {vb}·{st}"
            calc = shown(va) * shown(ct) - shown(vb) * shown(st)
        else:
            work = f"{va}·{st} + {vb}·{ct}"
            calc = shown(va) * shown(st) + shown(vb) * shown(ct)
        steps = [work]
        if hand is not None:
            if first:
                p1, p2 = _hround(shown(va) * shown(ct), hand), _hround(shown(vb) * shown(st), hand)
                steps.append(f"{operand(p1, False, hand)} − {_paren(fmt(p2, False, hand))}")
                calc = p1 - p2
            else:
                p1, p2 = _hround(shown(va) * shown(st), hand), _hround(shown(vb) * shown(ct), hand)
                steps.append(f"{operand(p1, False, hand)} + {operand(p2, False, hand)}")
                calc = p1 + p2
        text = " = ".join([symbolic, *steps, result])
        theta_t = fmt(theta, False, max(p, 3))
        details = (
            f"pair {i} = dims ({a}, {b}) ({rope.layout} layout); θ{_sub(i)} = {_base(rope.base)}^(−2·{i}/{d_k})"
            f" = {theta_t}; angle = position·θ{_sub(i)} = {pos}·{theta_t} = {fmt(angle, False, max(p, 3))} radians",
            f"cos {fmt(angle, False, max(p, 3))} = {ct} and sin {fmt(angle, False, max(p, 3))} = {st}",
        )
        if not first and hand is None:  # the pair is complete: a rotation keeps its length
            before = [operand(float(source[row, a]), src_int, p), operand(float(source[row, b]), src_int, p)]
            after = [operand(float(rotated[row, a]), False, p), operand(float(rotated[row, b]), False, p)]
            length = fmt(math.hypot(float(source[row, a]), float(source[row, b])), False, p)
            details += (f"a rotation keeps the pair's length, before: √({before[0]}·{before[0]} + {before[1]}·{before[1]})"
                        f" = {length}; after: √({after[0]}·{after[0]} + {after[1]}·{after[1]}) = {length}",)
            lengths_ok = all(agrees(math.hypot(shown(x), shown(y)), length) for x, y in (before, after))
        else:
            lengths_ok = True
        if lengths_ok and agrees(calc, result) and agrees(pos * shown(theta_t), fmt(angle, False, max(p, 3))):
            break
    return value, text, details


# --- Scale: the ALiBi term -----------------------------------------------------------------------


def alibi_line(head: HeadResult, row: int, col: int, positions: tuple[int, ...], score_int: bool, symbol: str | None,
               d: int, hand: int | None) -> tuple[str, str, str]:
    """``4 / √3 + 0.25·(1 − 2) = 2.309 + (-0.250) = 2.059``, the bias term alone and its value, one precision for all."""
    assert head.slope is not None and head.bias is not None
    slope = head.slope
    slope_int = slope == round(slope)
    distance = positions[col] - positions[row]
    score = float(head.scores[row, col])
    scaled, bias = float(head.scaled[row, col]), float(head.bias[row, col])
    result = fmt(scaled + bias, False, d)
    div_int = head.scale == round(head.scale)
    line, term, bias_t = "", "", ""
    # as in quotient_line: fixed decimals first, then the quotient's operands in scientific notation (a tiny
    # scale reads 0.000 at fixed decimals; a calculator needs its significant digits)
    # (by hand the first form that can be divided by is the one written down)
    forms = [(p, False) for p in _places(d, hand is not None)] + [(p, True) for p in range(d, SIGNIFICANT)]
    for p, scientific in forms:
        num_t = significant(score, score_int, p, scientific)
        div_t = symbol if symbol is not None else significant(head.scale, div_int, p, scientific)
        divisor = head.scale if symbol is not None else shown(div_t)
        if divisor == 0:
            continue
        q_t, bias_t = fmt(scaled, False, p), fmt(bias, False, p)
        given = repr(float(slope)) if not slope_int else str(int(slope))
        # the slope as written in the file when it is short (0.25, 0.0625): by hand too it is used as given
        slope_t = (f"({given})" if slope < 0 else given) if len(given) <= 10 else operand(slope, slope_int, p)
        term = f"{slope_t}·({positions[col]} − {positions[row]})"
        line = f"{num_t} / {div_t} + {term} = {operand(scaled, False, p)} + {operand(bias, False, p)} = {result}"
        total = shown(q_t) + shown(bias_t)
        sums = (abs(total - shown(result)) < 1e-9 * max(1.0, abs(total))) if p == d else agrees(total, result)
        whole = agrees(shown(num_t) / divisor + shown(slope_t) * distance, result)  # the left side, redone, too
        if hand is not None or (sums and whole and agrees(shown(num_t) / divisor, q_t)
                                and agrees(shown(slope_t) * distance, bias_t)):
            break
    return line, term, bias_t


# --- Softmax with a sink ----------------------------------------------------------------------------


def sink_row(head: HeadResult, row: int) -> tuple[Numbers, Numbers]:
    """The softmax row with the sink as an extra last column: its logit, and the share it takes."""
    assert head.sink is not None and head.sink_exp is not None
    logits = np.append(head.masked[row], head.sink)
    share = float(head.sink_exp[row] / head.row_sum[row])
    return logits, np.append(head.weights[row], share)


def _hround(x: float, decimals: int) -> float:
    """Rounded as the hand computation rounds: as the number's text reads."""
    return float(round_to(np.array(x), decimals))


def _paren(text: str) -> str:
    return f"({text})" if text.startswith("-") else text


def _sub(i: int) -> str:
    return "".join("₀₁₂₃₄₅₆₇₈₉"[int(ch)] for ch in str(i))


def _base(base: float) -> str:
    return str(int(base)) if base == round(base) and abs(base) < 1e15 else f"{base:g}"
