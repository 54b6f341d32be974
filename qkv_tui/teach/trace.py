"""The computation as the ordered single operations a person does by hand.

Stages follow the seed page: 1 Embed, 2 Project, 3 Score, 4 Scale (the mask is
applied here), 5 Softmax, 6 Mix, then Concat and W_O where the scenario has them;
each stage is a module of :mod:`qkv_tui.teach.stages`, and the trace walks their registry.
Per-head stages run once per head, head after head. The trace only stores segment
boundaries; an :class:`Operation` (with its arithmetic text) is built when asked
for, so a 512-token scenario costs nothing per operation until one is shown.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import Any, TypeVar

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation
from qkv_tui.core.fmt import fmt, is_integral
from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.sharing import shares_kv
from qkv_tui.teach import stages
from qkv_tui.teach.arith import SoftmaxRow
from qkv_tui.teach.stages.common import Operation, Ref, Segment, Stage, StageRun, StageSpec
from qkv_tui.teach.stages.embed import EMBED_POSITION_MEANING, INPUT_STAGE, residual_meaning, x_title
from qkv_tui.teach.stages.grads import KEY_COLS, KEY_ROWS
from qkv_tui.teach.stages.mix import VECTOR_WIDTH
from qkv_tui.teach.stages.project import WIDE
from qkv_tui.teach.stages.softmax import SAME_WEIGHT, softmax_row

__all__ = [
    "EMBED_POSITION_MEANING", "INPUT_STAGE", "SAME_WEIGHT", "STAGES", "VECTOR_WIDTH", "WIDE",
    "Operation", "Ref", "Segment", "Stage", "StageRun", "Trace", "residual_meaning", "x_title",
]

T = TypeVar("T")


class _Stages(Mapping[str, Stage]):
    """Every registered stage by its key, read from the registry each time (a stage a test registers is in it)."""

    def __getitem__(self, key: str) -> Stage:
        return stages.spec(key).stage

    def __iter__(self) -> Iterator[str]:
        return iter([s.stage.key for s in stages.everything()])

    def __len__(self) -> int:
        return len(stages.everything())


STAGES: Mapping[str, Stage] = _Stages()


class Trace:
    """Random access to every operation of a computation, built lazily."""

    def __init__(self, comp: Computation) -> None:
        self.comp = comp
        # as it is now, less the families this scenario lacks (their stages never run here and their modules
        # need not load): the trace keeps the stages it was built with
        registry = tuple(stages.for_scenario(comp.scenario))
        self._specs = {s.stage.key: s for s in registry}
        self._owners = {name: s for s in registry for name in s.matrices}  # which stage answers for a matrix
        self.transposed: dict[str, str] = {pane: shown for s in registry for pane, shown in s.transposed.items()}
        self._integral: dict[tuple[str, int | None], bool] = {}
        self._wide_cache: dict[str, Matrix] = {}
        self._offset_cache: dict[str, list[int]] = {}
        self._memo: dict[str, Any] = {}
        self.kv_owner, self.kv_readers = self._kv_heads()
        self.specs: tuple[StageSpec, ...] = tuple(s for s in registry if s.runs(self))  # the stages that run here
        self.stage_keys: list[str] = [s.stage.key for s in self.specs]
        numbers = {key: i + 1 for i, key in enumerate(self.stage_keys)}
        segs: list[Segment] = []

        def add(spec: StageSpec, head: int | None) -> None:
            for plan in spec.segments(self, head):
                start = segs[-1].stop if segs else 0
                key = spec.stage.key
                segs.append(Segment(key, numbers[key], head, plan.target, plan.rows, plan.cols, plan.per_row, start,
                                    spec.stage))

        for spec, head in self.walk():
            add(spec, head)
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
        self.op = lru_cache(maxsize=512)(self._build)

    def _kv_heads(self) -> tuple[list[int], dict[int, list[int]]]:
        """The query head that computes each head's K and V (GQA shares them; -1 where a part gives them from
        outside the layer), and an owner's readers."""
        comp, sc = self.comp, self.comp.scenario
        kv_owner: list[int] = []
        kv_readers: dict[int, list[int]] = {}
        owners_of: dict[int, list[int]] = {}  # a K/V head -> the query heads that compute one of its K, V
        for h, head in enumerate(comp.heads):
            if any(getattr(r, "kv_given", False) for r in head.parts.values()):
                kv_owner.append(-1)  # K and V are another layer's ([shared_kv]): no head here computes them
                continue
            # sharing is equality of the projections, so the first head that shares with h is an owner itself:
            # only the owners of h's K/V head need a look (not every earlier head: 300 heads stay linear)
            owners = owners_of.setdefault(head.kv_head, [])
            owner = next((g for g in owners if shares_kv(sc.heads[g], sc.heads[h])), h)
            if owner == h:
                owners.append(h)
            kv_owner.append(owner)
            kv_readers.setdefault(owner, []).append(h)
        return kv_owner, kv_readers

    def stage_groups(self) -> Iterator[tuple[bool, list[StageSpec]]]:
        """The stages in runs: (per head, the run). A run of per-head stages goes head after head (Project … Mix
        of head 1, then of head 2); the others once. The trace, the Markdown export and the worksheet all
        walk this order."""
        for per_head, group in itertools.groupby(self.specs, key=lambda s: s.per_head):
            yield per_head, list(group)

    def walk(self) -> Iterator[tuple[StageSpec, int | None]]:
        """Each stage with the head it runs for (None for a shared stage), in the trace's order."""
        for per_head, run in self.stage_groups():
            for head in range(len(self.comp.heads)) if per_head else [None]:
                for spec in run:
                    yield spec, head

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
        """The full values of a matrix named as in :class:`Ref`, from the stage that answers for it."""
        if name not in self._owners:
            raise KeyError(name)
        return self._owners[name].matrix(self, name, head)

    def spec(self, key: str) -> StageSpec:
        """The stage with this key, as registered when the trace was built."""
        return self._specs[key]

    def owner(self, name: str) -> StageSpec:
        """The stage that answers for a matrix (or a pane showing one transposed: K for Kᵀ)."""
        return self._owners[self.transposed.get(name, name)]

    def softmax_row(self, head: int, row: int, decimals: int) -> SoftmaxRow:
        """One softmax row as shown, one precision for the whole row."""
        return softmax_row(self, head, row, decimals)

    def memo(self, key: str, make: Callable[[], T]) -> T:
        """Something a stage works out once per trace (a cache of rows), made on first use."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]  # type: ignore[no-any-return]

    @property
    def split(self) -> bool:
        """The heads were cut from one wide matrix per role ([attention]), which the screen can show."""
        return bool(self.comp.scenario.num_heads_split) and len(self.comp.heads) > 1

    def is_wide(self, role: str) -> bool:
        """Whether a role's wide matrix is the heads' slices side by side (with shared K/V heads it is not)."""
        shared = self.comp.scenario.num_kv_heads not in (None, len(self.comp.heads))
        return self.split and (role == "W_Q" or not shared)

    def wide(self, name: str) -> Matrix:
        """A wide matrix (``W_Q_wide``): every head's slice side by side."""
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
        if name == "scores":  # a table whose numbers are never whole (a turn's cos and sin) turns what is scored
            return (not ask.scenario_has(sc, "scores_with_decimals") and self.integral("Q", head)
                    and self.integral("K", head))
        parts = self._owners[name].made_from(self, name, head) if name in self._owners else None
        return parts is not None and all(self.integral(n, h) for n, h in parts)

    # --- labels ------------------------------------------------------------

    def row_label(self, name: str, row: int) -> str:
        sc = self.comp.scenario
        if name.startswith(("W_", "dW_", "db_")) or name == "dsink":
            return str(row)
        if name.startswith("dnb_"):  # [deltanet]'s backward walks the tokens last first
            return sc.labels[sc.n - 1 - row]
        if name in ("dA_log", "ddt_bias"):  # summed over the tokens
            return "Σ"
        if name in KEY_ROWS:  # the backward pass's gradients at the keys' rows
            return sc.key_labels[row]
        if name in ("K", "V", "context_X"):
            return sc.key_labels[row]
        owner = self._owners.get(name)
        if owner is not None and (said := owner.row_label(self, name, row)) is not None:  # as its stage says
            return said
        if name in ("dn_wq", "dn_wk", "dn_wv"):  # [deltanet]'s convolution taps, the oldest token's first
            return f"tap {row}"
        return sc.labels[row]

    def col_label(self, name: str, col: int) -> str:
        owner = self._owners.get(name)
        if name in ("scores", "scaled", "weights", "bias", *KEY_COLS) or (
                owner is not None and name in owner.key_columns):  # a stage's own map, as its spec says
            return self.comp.scenario.key_labels[col]
        if name == "d_concat":
            return self.concat_label(col)
        if owner is not None and (said := owner.col_label(self, name, col)) is not None:  # as its stage says
            return said
        # a state d_k × d_v (or its gradient), a token's row read row by row: "i,j"
        if name in ("lin_S", "dn_S", "dn_decayed", "dnb_dS", "dnb_dSd"):
            widths = {h.d_v for h in self.comp.heads}
            if len(widths) == 1:
                return "{},{}".format(*divmod(col, widths.pop()))
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
        return self._specs[key].named(self)

    def x_title(self) -> str:
        return x_title(self.comp.scenario)

    def meaning(self, stage: str, head: int | None) -> str:
        """What a stage means, in words that fit this scenario (its mask, its scale, its sources)."""
        return self._specs[stage].meaning(self, head)

    # --- building operations ----------------------------------------------

    def formatted(self, name: str, head: int | None, value: float, decimals: int) -> str:
        """A value of a matrix as its panes write it (integers where the matrix is integral)."""
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
        return self._specs[seg.stage].operation(self, index, seg, row, col, decimals)

