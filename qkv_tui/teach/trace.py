"""The computation as the ordered single operations a person does by hand.

Stages follow the seed page: 1 Embed, 2 Project, 3 Score, 4 Scale (the mask is
applied here), 5 Softmax, 6 Mix, then Concat and W_O where the scenario has them.
Stages 2-6 run once per head, head after head. The trace only stores segment
boundaries; an :class:`Operation` (with its arithmetic text) is built when asked
for, so a 512-token scenario costs nothing per operation until one is shown.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from qkv_tui.core.engine import Computation
from qkv_tui.core.fmt import NEG_INF, fmt, is_integral
from qkv_tui.core.scenario import Head, Matrix, Scenario
from qkv_tui.teach import trace_variants as variants
from qkv_tui.teach.arith import (
    MAX_TERMS,
    SoftmaxRow,
    dot_line,
    dot_places,
    elide,
    quotient_line,
    significant,
    softmax_row,
    vector_mix,
)


@dataclass(frozen=True)
class Stage:
    key: str
    name: str
    meaning: str


STAGES: dict[str, Stage] = {s.key: s for s in (
    Stage("embed", "Embed",
          "Each token becomes a row of numbers, its embedding; stacked, the rows form X (n × d_model)."
          " In a full Transformer position information enters too: GPT-2 adds it to these rows, RoPE and"
          " ALiBi models bring it in later (by rotating Q and K, or as a bias on the scores). A small example"
          " like the seed's leaves it out to keep the multiply readable."),
    Stage("project", "Project",
          "Multiply X by three learned matrices. Row i of Q is what token i is looking for, row i of K"
          " what it advertises, row i of V the content it will contribute. Separate projections let a"
          " token ask for one thing and offer another."),
    Stage("score", "Score",
          "Each Query dots with every Key: cell (i, j) is how much token i wants token j."
          " A high score means 'this token looks relevant to me'. These are raw logits, not yet probabilities."),
    Stage("scale", "Scale",
          "Divide every score by √dₖ (Vaswani et al. §3.2.1): dot products grow with the width dₖ, and large"
          " scores push softmax to all-or-nothing weights with tiny gradients. Dividing never changes which"
          " key scores highest in a row, only how sharp the softmax is."),
    Stage("softmax", "Softmax",
          "Per row: subtract the row max (so exp never overflows), exponentiate, divide by the row sum."
          " Each row becomes its own probability distribution: shares that are never negative and add to 1."),
    Stage("mix", "Mix",
          "Blend the Value rows with the weights: each token's output is a weighted sum of the Values it"
          " may attend. That is how attention moves information across the sequence."),
    Stage("concat", "Concat",
          "Each head produced its own output. Place them side by side, left to right, one wide row per token."),
    Stage("wo", "W_O",
          "A final linear layer W_O mixes the heads' concatenated outputs into the model's output width."),
    Stage("norm", "Norm", variants.NORM_MEANING),  # after Embed
    Stage("rotate", "Rotate", variants.ROTATE_MEANING),  # after Project
)}

# A real model's X from layer 1 on is not an embedding: the stage is named for what it shows
INPUT_STAGE = Stage("embed", "Input",
                    "X is a real model's residual stream entering the layer shown: each token's embedding after"
                    " the earlier layers ran over it (attention and MLP, each added back into the row).")
EMBED_POSITION_MEANING = (
    "Each row of X is a token's embedding plus the learned embedding of its position (0, 1, 2, …), added"
    " before the first layer as GPT-2 does; stacked, the rows form X (n × d_model).")


def x_title(sc: Scenario) -> str:
    """What X holds, for its pane and its table: ``X (embeddings)``, ``X (residual stream into layer 2)``."""
    given = sc.input
    if given.kind == "residual":
        return f"X (residual stream into layer {given.layer})"
    return "X (token + position embeddings)" if given.kind == "embedding+position" else "X (embeddings)"


def residual_meaning(layer: int, learned_positions: bool) -> str:
    earlier = "layer 0 ran over it, adding" if layer == 1 else f"layers 0 … {layer - 1} ran over it, each adding"
    position = " (plus, in GPT-2 and models like it, the learned embedding of its position)" if learned_positions else ""
    return (f"X is not an embedding here: it is the residual stream entering layer {layer}. Each token's row started"
            f" as its embedding{position}, then {earlier} its attention output and then its MLP output back into the"
            " row. This layer reads the result, one row per token (n × d_model).")


HEAD_STAGES = ("project", "score", "scale", "softmax", "mix")
SAME_WEIGHT = "same weight:"  # the seed's way to one weight, after the row's list of e^s
VECTOR_WIDTH = 8  # the Mix stage's vector form is shown for Value rows up to this wide


@dataclass(frozen=True)
class Ref:
    """Cells an operation reads or writes: a row, a column, or one cell of a matrix."""

    matrix: str  # X, context_X, W_Q, W_K, W_V, Q, K, V, scores, scaled, weights, output, concat, W_O, final
    head: int | None  # None for matrices shared by all heads
    row: int | None = None  # None = every row
    col: int | None = None  # None = every column


@dataclass(frozen=True)
class Segment:
    """A run of operations that fill one matrix, row-major."""

    stage: str
    number: int  # 1-based stage number as shown (3/6 Score)
    head: int | None
    target: str
    rows: int
    cols: int
    per_row: bool  # one operation fills a whole row (Embed, Concat)
    start: int  # index of its first operation

    @property
    def count(self) -> int:
        return self.rows if self.per_row else self.rows * self.cols

    @property
    def stop(self) -> int:
        return self.start + self.count


@dataclass(frozen=True)
class StageRun:
    """One stage of one head (or a shared stage): operations start..stop-1."""

    stage: str
    number: int
    head: int | None
    start: int
    stop: int


@dataclass(frozen=True)
class Operation:
    """One step: one cell (or one row) of one matrix, with its arithmetic."""

    index: int
    segment: Segment
    row: int
    col: int | None  # None when the operation fills a whole row
    value: float | None  # the cell's value (None for row operations)
    operands: tuple[Ref, ...]
    arithmetic: str  # e.g. "Q[I,0] = X[I]·W_Q[:,0] = 1·1 + 0·0 + 1·1 + 0·0 = 2"
    details: tuple[str, ...] = ()

    @property
    def stage(self) -> Stage:
        return STAGES[self.segment.stage]

    @property
    def head(self) -> int | None:
        return self.segment.head

    @property
    def target(self) -> Ref:
        return Ref(self.segment.target, self.segment.head, self.row, self.col)


class Trace:
    """Random access to every operation of a computation, built lazily."""

    def __init__(self, comp: Computation) -> None:
        self.comp = comp
        sc = comp.scenario
        n, m = sc.n, sc.m
        self.stage_keys: list[str] = ["embed", *HEAD_STAGES]
        if comp.norm is not None:
            self.stage_keys.insert(1, "norm")
        if sc.rope is not None:
            self.stage_keys.insert(self.stage_keys.index("project") + 1, "rotate")
        if len(comp.heads) > 1:
            self.stage_keys.append("concat")
        if comp.W_O is not None:
            self.stage_keys.append("wo")
        numbers = {key: i + 1 for i, key in enumerate(self.stage_keys)}
        segs: list[Segment] = []

        def add(stage: str, head: int | None, target: str, rows: int, cols: int, per_row: bool = False) -> None:
            start = segs[-1].stop if segs else 0
            segs.append(Segment(stage, numbers[stage], head, target, rows, cols, per_row, start))

        add("embed", None, "X", n, sc.X.shape[1], per_row=True)
        if comp.norm is not None:
            add("norm", None, "X_norm", n, sc.X.shape[1])
        self.kv_owner: list[int] = []  # the query head that computes each head's K and V (GQA shares them)
        self.kv_readers: dict[int, list[int]] = {}  # an owner -> the query heads that read its K and V
        owners_of: dict[int, list[int]] = {}  # a K/V head -> the query heads that compute one of its K, V
        for h, head in enumerate(comp.heads):
            # sharing is equality of the projections, so the first head that shares with h is an owner itself:
            # only the owners of h's K/V head need a look (not every earlier head: 300 heads stay linear)
            owners = owners_of.setdefault(head.kv_head, [])
            owner = next((g for g in owners if _shares_kv(sc.heads[g], sc.heads[h])), h)
            if owner == h:
                owners.append(h)
            self.kv_owner.append(owner)
            self.kv_readers.setdefault(owner, []).append(h)
            add("project", h, "Q", n, head.d_k)
            if owner == h:
                add("project", h, "K", m, head.d_k)
                add("project", h, "V", m, head.d_v)
            if sc.rope is not None:
                add("rotate", h, "Q_rot", n, head.d_k)
                if owner == h:
                    add("rotate", h, "K_rot", m, head.d_k)
            add("score", h, "scores", n, m)
            add("scale", h, "scaled", n, m)
            add("softmax", h, "weights", n, m)
            add("mix", h, "output", n, head.d_v)
        if "concat" in numbers:
            add("concat", None, "concat", n, comp.concat.shape[1], per_row=True)
        if "wo" in numbers:
            add("wo", None, "final", n, comp.output.shape[1])
        self.segments: tuple[Segment, ...] = tuple(segs)
        self._starts = [s.start for s in segs]
        runs: list[StageRun] = []
        for seg in segs:
            if runs and runs[-1].stage == seg.stage and runs[-1].head == seg.head:
                runs[-1] = StageRun(seg.stage, seg.number, seg.head, runs[-1].start, seg.stop)
            else:
                runs.append(StageRun(seg.stage, seg.number, seg.head, seg.start, seg.stop))
        self.runs: tuple[StageRun, ...] = tuple(runs)
        self._by_target = {(s.target, s.head): s for s in segs}
        self._integral: dict[tuple[str, int | None], bool] = {}
        self._wide_cache: dict[str, Matrix] = {}
        self._offset_cache: dict[str, list[int]] = {}
        self.op = lru_cache(maxsize=512)(self._build)
        # one precision per softmax / mix row, so a row's lines show its numbers alike
        self.softmax_row = lru_cache(maxsize=64)(self._softmax_row)
        self._mix_places = lru_cache(maxsize=64)(self._mix_row_places)

    # --- structure ---------------------------------------------------------

    def __len__(self) -> int:
        return self.segments[-1].stop

    @property
    def stage_count(self) -> int:
        return len(self.stage_keys)

    def segment_at(self, index: int) -> Segment:
        return self.segments[bisect.bisect_right(self._starts, index) - 1]

    def segment_for(self, target: str, head: int | None) -> Segment | None:
        return self._by_target.get((target, head))

    def filled(self, target: str, head: int | None, index: int) -> int:
        """How many cells of a matrix (row-major) are computed once operation ``index`` is done."""
        seg = self.segment_for(target, head)
        if seg is None:  # inputs: given, always complete
            return 1 << 62
        done = min(max(index - seg.start + 1, 0), seg.count)
        return done * seg.cols if seg.per_row else done

    def matrix(self, name: str, head: int | None) -> Matrix:
        """The full values of a matrix named as in :class:`Ref`."""
        comp = self.comp
        if head is not None and name in HEAD_MATRICES:
            return getattr(comp.heads[head], "masked" if name == "scaled" else name)  # type: ignore[no-any-return]
        if head is not None and name == "sink":
            return self.sink_panel(head)
        if name == "X":
            return comp.scenario.X
        if name == "X_norm" and comp.norm is not None:
            return comp.norm.X_norm
        if name == "context_X":
            return comp.scenario.X_kv
        if name == "concat":
            return comp.concat
        if name == "final":
            return comp.output
        if name == "W_O" and comp.W_O is not None:
            return comp.W_O
        if name in WIDE and self.is_wide(name.removesuffix("_wide")):
            return self._wide(name)
        raise KeyError(name)

    @property
    def split(self) -> bool:
        """The heads were cut from one wide matrix per role ([attention]), which the screen can show."""
        return bool(self.comp.scenario.num_heads_split) and len(self.comp.heads) > 1

    def is_wide(self, role: str) -> bool:
        """Whether a role's wide matrix is the heads' slices side by side (with shared K/V heads it is not)."""
        shared = self.comp.scenario.num_kv_heads not in (None, len(self.comp.heads))
        return self.split and (role == "W_Q" or not shared)

    def _wide(self, name: str) -> Matrix:
        # head h took columns h·d_k … (h+1)·d_k − 1 of the file's matrix: side by side they are that matrix
        if name not in self._wide_cache:
            role = name.removesuffix("_wide")
            wide = np.concatenate([getattr(h, role) for h in self.comp.heads], axis=1)
            wide.setflags(write=False)
            self._wide_cache[name] = wide
        return self._wide_cache[name]

    def wide_offset(self, role: str, head: int) -> int:
        """Where a head's slice of the wide matrix starts."""
        return self._offsets(role)[head]

    def _offsets(self, role: str) -> list[int]:
        """Where each head's columns of a role start in the heads' matrices side by side, then the total width
        (worked out once: a label per column must not walk every head, or 300 heads cost 300² steps)."""
        if role not in self._offset_cache:
            widths = [getattr(h, role).shape[1] for h in self.comp.heads]
            self._offset_cache[role] = [0, *itertools.accumulate(widths)]
        return self._offset_cache[role]

    def _head_column(self, role: str, col: int) -> str:
        """``h2:0``: column ``col`` of the heads' ``role`` matrices side by side is head 2's column 0."""
        offsets = self._offsets(role)
        if not 0 <= col < offsets[-1]:
            raise IndexError(col)
        h = bisect.bisect_right(offsets, col) - 1
        return f"h{h + 1}:{col - offsets[h]}"

    def integral(self, name: str, head: int | None) -> bool:
        """Whether a matrix is written as integers: one rule, so a value reads the same in every pane.

        Inputs are integers when the file gives whole numbers; Q, K, V and the scores when
        everything they are multiplied from is; everything from the division on (scaled,
        weights, outputs, concat, final) always has decimals, even where a value happens to
        be whole.
        """
        key = (name, head)
        if key not in self._integral:
            self._integral[key] = self._derive_integral(name, head) and is_integral(self.matrix(name, head))
        return self._integral[key]

    def _derive_integral(self, name: str, head: int | None) -> bool:
        if name in ("X", "context_X", "W_Q", "W_K", "W_V", "W_O", *WIDE):
            return True  # as given: is_integral decides
        sc = self.comp.scenario
        cross = sc.is_cross
        x_in = "X" if self.comp.norm is None else "X_norm"
        if name in ("Q", "K", "V") and head is not None:
            bias = getattr(self.comp.heads[head], f"b_{name}")
            if bias is not None and not bool(np.all(bias == np.round(bias))):
                return False
        if name == "Q":
            return self.integral(x_in, None) and self.integral("W_Q", head)
        if name in ("K", "V"):
            return self.integral("context_X" if cross else x_in, None) and self.integral(f"W_{name}", head)
        if name == "scores":
            return sc.rope is None and self.integral("Q", head) and self.integral("K", head)
        return False

    # --- labels ------------------------------------------------------------

    def row_label(self, name: str, row: int) -> str:
        sc = self.comp.scenario
        if name.startswith("W_"):
            return str(row)
        if name in ("K", "V", "context_X", "K_rot"):
            return sc.key_labels[row]
        return sc.labels[row]

    def col_label(self, name: str, col: int) -> str:
        if name in ("scores", "scaled", "weights", "bias"):
            return self.comp.scenario.key_labels[col]
        if name in ("Q_rot", "K_rot") and self.comp.scenario.rope is not None:
            # which pair each dimension belongs to: the two layouts pair different columns
            d_k = self.comp.heads[0].d_k
            pair = next(i for i, ab in enumerate(self.comp.scenario.rope.pairs(d_k)) if col in ab)
            return f"{col}p{pair}"
        if name == "sink":
            return ("logit", "exp", "Σw")[col]
        if name == "concat":
            return self.concat_label(col)
        if name in WIDE:
            return self.slice_label(name.removesuffix("_wide"), col)
        return str(col)

    def slice_label(self, role: str, col: int) -> str:
        """A wide matrix's column by the head whose slice it is: ``h2:0`` is head 2's column 0."""
        return self._head_column(role, col)

    def concat_label(self, col: int) -> str:
        """Which head a concatenated column came from: ``h2:0`` is head 2's column 0."""
        if len(self.comp.heads) == 1:
            return str(col)
        return self._head_column("V", col)  # each head's output is d_v wide, as its V

    def stage(self, key: str) -> Stage:
        """The stage as this scenario names it: Embed is "Input" where X is a model's residual stream."""
        if key == "embed" and not self.comp.scenario.input.is_embedding:
            return INPUT_STAGE
        return STAGES[key]

    def x_title(self) -> str:
        return x_title(self.comp.scenario)

    def meaning(self, stage: str, head: int | None) -> str:
        """What a stage means, in words that fit this scenario (its mask, its scale, its sources)."""
        sc = self.comp.scenario
        text = STAGES[stage].meaning
        if stage == "embed" and sc.input.kind == "residual":
            assert sc.input.layer is not None
            text = residual_meaning(sc.input.layer, learned_positions=sc.rope is None and sc.alibi is None)
        elif stage == "embed" and sc.input.kind == "embedding+position":
            text = EMBED_POSITION_MEANING
        if stage == "embed" and sc.rope is not None:
            text += " Here position enters at the Rotate stage, which turns Q and K by each token's position."
        elif stage == "embed" and sc.alibi is not None:
            text += " Here position enters at the Scale stage, as ALiBi's distance bias on the scores."
        if stage == "project" and sc.is_cross:
            text = ("Multiply by three learned matrices: Q = X·W_Q from the query tokens, but K = X_ctx·W_K and"
                    " V = X_ctx·W_V from the context (cross-attention: in a translator the decoder's tokens ask"
                    " and the encoder's output answers, Vaswani et al. §3.2.3). Row i of Q is what query token i"
                    " is looking for, row j of K what context token j advertises, row j of V the content it will"
                    " contribute.")
        if stage == "scale":
            hr = self.comp.heads[head if head is not None else 0]
            if not hr.scale_is_default:
                text = _own_scale(hr.scale, hr.d_k)
            if sc.alibi is not None:
                text += (" ALiBi then adds slope·(j − i) to each scaled cell (after the division, as BLOOM's code does):"
                         " 0 on the diagonal and more negative the further back the key, so nearer keys are favoured;"
                         " the bias pane shows it, and the softmax takes the sum.")
            if sc.mask_kind == "sliding" and sc.window is not None:
                w = sc.window
                text += (f" The sliding window of {w} applies here: a token sees itself and the {w - 1} before it"
                         f" (0 ≤ i − j < {w}), so older keys become −∞ as well as later ones. That counts {w} keys,"
                         " the query's own included, as Hugging Face transformers and gpt-oss count their"
                         f" sliding_window; FlashAttention writes the same window as window_size = ({w - 1}, 0), and"
                         f" the Mistral paper, where position i sees i − W … i, as W = {w - 1}.")
            elif sc.mask_kind != "none":
                text += (f" The {sc.mask_kind} mask applies here: masked cells become −∞ (as PyTorch does with a"
                         " boolean mask; Hugging Face's eager attention adds finfo.min, the original BERT −10000),"
                         " so they get weight 0.")
        if stage == "project" and sc.num_kv_heads is not None:
            text += (f" Grouped K/V heads: {len(self.comp.heads)} query heads share {sc.num_kv_heads} K/V"
                     f" head{'s' if sc.num_kv_heads != 1 else ''}, so each K and V is computed once, by the first"
                     " query head that reads it.")
        if stage == "project" and self.comp.norm is not None:
            text += " The projections read X̂, the normalised X."
        if stage == "softmax" and any(h.sink is not None for h in self.comp.heads):
            text += " A sink is one more logit in each row's sum, then dropped: rows add up to less than 1."
        return text

    # --- building operations ----------------------------------------------

    def _fmt(self, name: str, head: int | None, value: float, decimals: int) -> str:
        return fmt(float(value), self.integral(name, head), decimals)

    @property
    def hand(self) -> int | None:
        """The decimals every intermediate was rounded to, when the computation was done by hand."""
        return self.comp.hand_decimals

    def _build(self, index: int, decimals: int = 3) -> Operation:
        if not 0 <= index < len(self):
            raise IndexError(f"operation {index} out of range 0..{len(self) - 1}")
        seg = self.segment_at(index)
        offset = index - seg.start
        if seg.per_row:
            row, col = offset, None
        else:
            row, col = divmod(offset, seg.cols)
        builder = getattr(self, f"_op_{seg.stage}")
        return builder(index, seg, row, col, decimals)  # type: ignore[no-any-return]

    def _op_embed(self, index: int, seg: Segment, row: int, col: None, d: int) -> Operation:
        sc = self.comp.scenario
        token, spelt = sc.labels[row], sc.tokens[row]  # ▁the₂ is the second "▁the"; its embedding is the token's
        x = sc.X[row]
        integral = self.integral("X", None)
        # a real model's row has hundreds of numbers: the line keeps its ends; the X pane holds them all
        values = "[" + elide([fmt(float(v), integral, d) for v in x], ", ") + "]"
        given = sc.input
        if given.kind == "residual":
            what = f'residual stream entering layer {given.layer} at "{token}"'
        elif given.kind == "embedding+position":
            what = f'embedding of "{spelt}" + embedding of position {row}'
        else:
            what = f'embedding of "{spelt}"'
        text = f"X[{token}] = {what} = {values}"
        return Operation(index, seg, row, None, None, (), text)

    def _op_project(self, index: int, seg: Segment, row: int, col: int, d: int) -> Operation:
        h = seg.head
        assert h is not None
        sc = self.comp.scenario
        if seg.target in ("K", "V") and sc.is_cross:
            source, src_name, xs = sc.X_kv, "context_X", "X_ctx"
        elif self.comp.norm is not None:
            source, src_name, xs = self.comp.norm.X_norm, "X_norm", "X̂"
        else:
            source, src_name, xs = sc.X, "X", "X"
        weight_name = f"W_{seg.target}"
        head = self.comp.heads[h]
        W = getattr(head, weight_name)
        bias = getattr(head, f"b_{seg.target}")
        value = float(getattr(head, seg.target)[row, col])
        label = self.row_label(seg.target, row)
        result = self._fmt(seg.target, h, value, d)
        src_int, w_int = self.integral(src_name, None), self.integral(weight_name, h)
        # split heads: name the column of the wide matrix the screen shows, h2:0 for head 2's column 0
        wide = self.is_wide(weight_name)
        wcol = self.slice_label(weight_name, self.wide_offset(weight_name, h) + col) if wide else str(col)
        if bias is None:
            work = dot_line(source[row], W[:, col], src_int, w_int, result, d, self.hand)
            text = f"{seg.target}[{label},{col}] = {xs}[{label}]·{weight_name}[:,{wcol}] = {work}"
        else:
            work = variants.dot_bias_line(source[row], W[:, col], float(bias[col]), src_int, w_int, result, d, self.hand)
            text = f"{seg.target}[{label},{col}] = {xs}[{label}]·{weight_name}[:,{wcol}] + b_{seg.target}[{col}] = {work}"
        operands = (Ref(src_name, None, row, None), Ref(weight_name, h, None, col))
        details: tuple[str, ...] = ()
        if seg.target == "K" and row == col == 0 and sc.num_kv_heads is not None:  # said once per K/V head
            sharing = self.kv_readers[h]
            names = ", ".join(str(g + 1) for g in sharing)
            ratio = len(self.comp.heads) / sc.num_kv_heads
            details = (f"K/V head {head.kv_head + 1} is computed once and read by query heads {names}; the KV cache"
                       f" keeps {sc.num_kv_heads} K/V head{'s' if sc.num_kv_heads != 1 else ''} instead of"
                       f" {len(self.comp.heads)}: {ratio:g}× smaller",)
        return Operation(index, seg, row, col, value, operands, text, details)

    def _op_norm(self, index: int, seg: Segment, row: int, col: int, d: int) -> Operation:
        assert self.comp.norm is not None
        token = self.comp.scenario.labels[row]
        value = float(self.comp.norm.X_norm[row, col])
        text, details = variants.norm_lines(self.comp, row, col, token, d, self.hand)
        return Operation(index, seg, row, col, value, (Ref("X", None, row),), text, details)

    def _op_rotate(self, index: int, seg: Segment, row: int, col: int, d: int) -> Operation:
        h = seg.head
        assert h is not None and self.comp.scenario.rope is not None
        value, text, details = variants.rotate_lines(self.comp, h, seg.target, row, col, d, self.hand)
        source = "Q" if seg.target == "Q_rot" else "K"
        pair = next(ab for ab in self.comp.scenario.rope.pairs(self.comp.heads[h].d_k) if col in ab)
        operands = (Ref(source, h, row, pair[0]), Ref(source, h, row, pair[1]))
        return Operation(index, seg, row, col, value, operands, text, details)

    def sink_panel(self, head: int) -> Matrix:
        """The softmax's extra sink column per row: its logit, its exponential, and the row's Σ weights."""
        hr = self.comp.heads[head]
        assert hr.sink is not None and hr.sink_exp is not None
        panel = np.stack([np.full(len(hr.row_sum), hr.sink), hr.sink_exp, hr.weights.sum(axis=1)], axis=1)
        panel.setflags(write=False)
        return panel

    def _op_score(self, index: int, seg: Segment, row: int, col: int, d: int) -> Operation:
        h = seg.head
        assert h is not None
        head = self.comp.heads[h]
        value = float(head.scores[row, col])
        q, k = self.comp.scenario.labels[row], self.comp.scenario.key_labels[col]
        result = self._fmt("scores", h, value, d)
        qn, kn = ("Q_rot", "K_rot") if head.Q_rot is not None else ("Q", "K")
        qs, ks = ("Q'", "K'") if head.Q_rot is not None else ("Q", "K")
        work = dot_line(head.Q_used[row], head.K_used[col], self.integral(qn, h), self.integral(kn, h), result, d,
                        self.hand)
        text = f"scores[{q},{k}] = {qs}[{q}]·{ks}[{k}] = {work}"
        details: tuple[str, ...] = ()
        sc = self.comp.scenario
        if head.Q_rot is not None and sc.positions is not None:
            distance = sc.positions[row] - sc.positions[col]
            details = (f"both vectors are rotated by their own position, so position enters this score only through"
                       f" the distance {sc.positions[row]} − {sc.positions[col]} = {distance}; the vectors themselves"
                       " decide the rest",)
        return Operation(index, seg, row, col, value, (Ref(qn, h, row), Ref(kn, h, col)), text, details)

    def _op_scale(self, index: int, seg: Segment, row: int, col: int, d: int) -> Operation:
        h = seg.head
        assert h is not None
        head = self.comp.heads[h]
        q, k = self.comp.scenario.labels[row], self.comp.scenario.key_labels[col]
        scaled = fmt(float(head.scaled[row, col]), False, d)
        # by hand √dₖ is written down rounded (√3 ≈ 1.732) and divided by as such
        symbol = f"√{head.d_k}" if head.scale_is_default and self.hand is None else None
        work = quotient_line(float(head.scores[row, col]), self.integral("scores", h), head.scale, symbol,
                             head.scale == round(head.scale), scaled, d)
        extra: tuple[str, ...] = ()
        if head.bias is not None and self.comp.scenario.positions is not None:
            work, term, bias_t = variants.alibi_line(head, row, col, self.comp.scenario.positions,
                                                   self.integral("scores", h), symbol, d, self.hand)
            extra = (f"ALiBi: {head.name}'s slope {head.slope or 0:g} times the distance"
                     f" j − i; bias = {term} = {bias_t}",)
        text = f"scaled[{q},{k}] = {work}"
        details: tuple[str, ...] = ()
        value = float(head.masked[row, col])
        if not self.comp.allow[row, col]:
            text += f", masked → {NEG_INF}"
            details = (self._mask_reason(row, col),)
        elif head.scale_is_default and self.hand is None:
            details = (f"dₖ = {head.d_k}, so √dₖ = √{head.d_k} = {fmt(math.sqrt(head.d_k), False, d)}",)
        elif head.scale_is_default:
            details = (f"dₖ = {head.d_k}; by hand √{head.d_k} is rounded to {fmt(head.scale, False, d)} first",)
        else:
            tiny = head.scale < 1e-3  # fixed decimals would read 0.000000: its significant digits instead
            given = significant(head.scale, head.scale == round(head.scale), d if tiny else d + 3, tiny)
            details = (f"the scenario sets scale = {given}"
                       f" instead of √dₖ = √{head.d_k}",)
        operands: tuple[Ref, ...] = (Ref("scores", h, row, col),)
        if head.bias is not None:
            operands += (Ref("bias", h, row, col),)
        return Operation(index, seg, row, col, value, operands, text, extra + details)

    def _mask_reason(self, row: int, col: int) -> str:
        sc = self.comp.scenario
        q, k = sc.labels[row], sc.key_labels[col]
        if sc.mask_kind == "causal":
            return f'causal mask: "{k}" comes after "{q}", and a token may not look ahead; weight will be exactly 0'
        if sc.mask_kind == "sliding" and col <= row:
            return (f'sliding window of {sc.window}: "{k}" is {row - col} tokens before "{q}", out of reach;'
                    " weight will be exactly 0")
        if sc.mask_kind == "sliding":
            return f'sliding window (causal): "{k}" comes after "{q}"; weight will be exactly 0'
        if sc.mask_kind == "padding":
            return f'padding mask: "{k}" is padding, never attended; weight will be exactly 0'
        return f'custom mask: "{q}" may not attend "{k}"; weight will be exactly 0'

    def _softmax_row(self, head: int, row: int, decimals: int) -> SoftmaxRow:
        hr = self.comp.heads[head]
        if hr.sink is not None:  # the sink is one more column of the row until the weights are read off
            logits, weights = variants.sink_row(hr, row)
            return softmax_row(logits, weights, decimals)
        return softmax_row(hr.masked[row], hr.weights[row], decimals)

    def _op_softmax(self, index: int, seg: Segment, row: int, col: int, d: int) -> Operation:
        h = seg.head
        assert h is not None
        head = self.comp.heads[h]
        sc = self.comp.scenario
        q, k = sc.labels[row], sc.key_labels[col]
        value = float(head.weights[row, col])
        r = self.softmax_row(h, row, d)
        w = r.weights[col]
        if r.scaled[col] == NEG_INF:
            text = f"weights[{q},{k}] = e^{NEG_INF} / {r.total} = 0 (masked)"
        else:
            s, top = r.scaled[col], r.top
            text = (f"weights[{q},{k}] = e^({s} − {_paren(top)}) / {r.total} = e^{r.shifted[col]} / {r.total}"
                    f" = {r.exps[col]} / {r.total} = {w}")
        # a long row keeps only the keys it may attend (masked ones add e^−∞ = 0) and names its max
        sink = head.sink is not None  # the sink is the row's last column until the weights are read off
        keep = [j for j, t in enumerate(r.scaled) if len(r.scaled) <= MAX_TERMS or t != NEG_INF]
        exps = [f"{'sink: ' if sink and j == len(r.scaled) - 1 else ''}e^{r.shifted[j]} = {r.exps[j]}" for j in keep]
        if len(keep) <= MAX_TERMS:
            label = "row max (the last is the sink)" if sink else "row max"
            top = f"{label} = max({', '.join(r.scaled[j] for j in keep)}) = {r.top}"
        else:
            top = f"row max = {r.top}, at {sc.key_labels[int(np.argmax(head.masked[row]))]}"
        details = [top, f"e^(s − max): {elide(exps, ' | ')}  →  Σ = {r.total}"]
        if sink:
            details.append(f"the sink's column is dropped after the sum: weights add up to"
                           f" {fmt(float(head.weights[row].sum()), False, d)}, not 1")
        if r.plain is not None and r.plain_total is not None:
            plain = [f"e^{s} = {e}" for s, e in zip(r.scaled, r.plain) if s != NEG_INF]
            if sink:
                plain[-1] = f"sink: {plain[-1]}"
            line = f"without the max, as the seed does: {elide(plain, ' | ')}  →  Σ e^s = {r.plain_total}"
            if r.scaled[col] != NEG_INF:
                line += f"; {SAME_WEIGHT} e^{r.scaled[col]} / Σ e^s = {r.plain[col]} / {r.plain_total} = {w}"
            details.append(line)
        return Operation(index, seg, row, col, value, (Ref("scaled", h, row),), text, tuple(details))

    def _mix_row_places(self, head: int, row: int, decimals: int) -> int:
        hr = self.comp.heads[head]
        results = [self._fmt("output", head, v, decimals) for v in hr.output[row]]
        rows = [(hr.weights[row], hr.V[:, j], results[j]) for j in range(hr.d_v)]
        return dot_places(rows, False, self.integral("V", head), decimals, self.hand)

    def _op_mix(self, index: int, seg: Segment, row: int, col: int, d: int) -> Operation:
        h = seg.head
        assert h is not None
        head = self.comp.heads[h]
        q = self.comp.scenario.labels[row]
        value = float(head.output[row, col])
        v_int = self.integral("V", h)
        places = self._mix_places(h, row, d)
        result = self._fmt("output", h, value, d)
        work = dot_line(head.weights[row], head.V[:, col], False, v_int, result, d, self.hand, places)
        text = f"out[{q},{col}] = weights[{q}]·V[:,{col}] = {work}"
        details: tuple[str, ...] = ()
        if head.d_v <= VECTOR_WIDTH and col == head.d_v - 1:  # the row's vector, once all of it is computed
            results = [self._fmt("output", h, v, d) for v in head.output[row]]
            form = vector_mix(head.weights[row], head.V, v_int, results, places, self.hand)
            if form:
                details = (f"out[{q}] = {form}",)
        return Operation(index, seg, row, col, value, (Ref("weights", h, row), Ref("V", h, None, col)), text, details)

    def _op_concat(self, index: int, seg: Segment, row: int, col: None, d: int) -> Operation:
        q = self.comp.scenario.labels[row]
        pieces, refs = [], []
        for h, head in enumerate(self.comp.heads):
            pieces.append(", ".join(self._fmt("output", h, v, d) for v in head.output[row]))
            refs.append(Ref("output", h, row))
        names = " | ".join(f"{head.name} out[{q}]" for head in self.comp.heads)
        text = f"concat[{q}] = [{names}] = [{' | '.join(pieces)}]"
        return Operation(index, seg, row, None, None, tuple(refs), text)

    def _op_wo(self, index: int, seg: Segment, row: int, col: int, d: int) -> Operation:
        comp = self.comp
        assert comp.W_O is not None
        q = comp.scenario.labels[row]
        value = float(comp.output[row, col])
        result = self._fmt("final", None, value, d)
        if comp.b_O is None:
            work = dot_line(comp.concat[row], comp.W_O[:, col], self.integral("concat", None),
                            self.integral("W_O", None), result, d, self.hand)
            text = f"final[{q},{col}] = concat[{q}]·W_O[:,{col}] = {work}"
        else:
            work = variants.dot_bias_line(comp.concat[row], comp.W_O[:, col], float(comp.b_O[col]),
                                        self.integral("concat", None), self.integral("W_O", None), result, d, self.hand)
            text = f"final[{q},{col}] = concat[{q}]·W_O[:,{col}] + b_O[{col}] = {work}"
        return Operation(index, seg, row, col, value, (Ref("concat", None, row), Ref("W_O", None, None, col)), text)


HEAD_MATRICES = ("W_Q", "W_K", "W_V", "Q", "K", "V", "scores", "scaled", "weights", "output", "Q_rot", "K_rot", "bias")
WIDE = ("W_Q_wide", "W_K_wide", "W_V_wide")  # split scenarios: every head's slice side by side


def _shares_kv(a: Head, b: Head) -> bool:
    """Two query heads read one K/V head: the same projections, so K and V are computed once."""
    def same(x: Matrix | None, y: Matrix | None) -> bool:
        if x is None or y is None:
            return x is y
        return x is y or (x.shape == y.shape and bool(np.array_equal(x, y)))

    return a.kv_head == b.kv_head and all(same(getattr(a, r), getattr(b, r)) for r in ("W_K", "W_V", "b_K", "b_V"))


def _own_scale(scale: float, d_k: int) -> str:
    """The Scale stage's meaning when the scenario sets its own divisor instead of √dₖ."""
    paper = (f"Vaswani et al. (§3.2.1) divide by √dₖ = √{d_k} instead, because dot products grow with the"
             " width dₖ and large scores push softmax to all-or-nothing weights with tiny gradients.")
    if scale == 1:
        return ("This scenario sets scale = 1: the scores pass through undivided, as several published"
                f" walkthroughs do. {paper}")
    return (f"Divide every score by {scale:g}, the scale this scenario sets. {paper} Any division leaves which"
            " key scores highest in a row unchanged, only how sharp the softmax is.")


def _paren(text: str) -> str:
    """A subtrahend in parentheses when negative: ``0.5 − (-1.000)``."""
    return f"({text})" if text.startswith("-") else text
