"""Stage 1, Embed: each token's row of X (or, for a real model's later layer, the residual stream it reads)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.fmt import fmt
from qkv_tui.core.layer_schedule import single_adds
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.teach.arith import elide
from qkv_tui.teach.stages.common import INPUT, FormulaPart, Key, Operation, Plan, Ref, Segment, Stage, StageSpec, counts
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, dot_cell, grads, has_backward
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.printed import PrintedChain, Table, idx

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.scenario import Scenario


STAGE = Stage("embed", "Embed",
              "Each token becomes a row of numbers, its embedding; stacked, the rows form X (n × d_model)."
              " In a full Transformer position information enters too: GPT-2 adds it to these rows, RoPE and"
              " ALiBi models bring it in later (by rotating Q and K, or as a bias on the scores). A small example"
              " like the seed's leaves it out to keep the multiply readable.")

# A real model's X from layer 1 on is not an embedding: the stage is named for what it shows
INPUT_STAGE = Stage("embed", "Input",
                    "X is a real model's residual stream entering the layer shown: each token's embedding after"
                    " the earlier layers ran over it (attention and MLP, each added back into the row).")
EMBED_TYPE_MEANING = (
    "Each row of X is a token's embedding plus the learned embedding of its position (0, 1, 2, …) plus the"
    " embedding of its token type (0: one sentence), then the LayerNorm of that sum, as BERT makes its input;"
    " stacked, the rows form X (n × d_model).")
EMBED_POSITION_MEANING = (
    "Each row of X is a token's embedding plus the learned embedding of its position (0, 1, 2, …), added"
    " before the first layer as GPT-2 does; stacked, the rows form X (n × d_model).")


def x_title(sc: Scenario) -> str:
    """What X holds, for its pane and its table: ``X (embeddings)``, ``X (residual stream into layer 2)``."""
    given = sc.input
    if given.kind == "residual":
        return f"X (residual stream into layer {given.layer})"
    if given.kind == "altup":
        return f"X (normed AltUp prediction, layer {given.layer})"
    if given.kind == "embedding+position+type":
        return "X (LayerNorm of token + position + type embeddings)"
    return "X (token + position embeddings)" if given.kind == "embedding+position" else "X (embeddings)"


def residual_meaning(layer: int, learned_positions: bool, adds: str | None = None) -> str:
    """What a residual stream's row holds; ``adds``: what each earlier layer added, where a table says (a Mamba-2
    block adds its mixer's output, no attention and no MLP), else its attention output and then its MLP output."""
    earlier = "layer 0 ran over it, adding" if layer == 1 else f"layers 0 … {layer - 1} ran over it, each adding"
    position = " (plus, in GPT-2 and models like it, the learned embedding of its position)" if learned_positions else ""
    added = adds if adds is not None else "its attention output and then its MLP output"
    return (f"X is not an embedding here: it is the residual stream entering layer {layer}. Each token's row started"
            f" as its embedding{position}, then {earlier} {added} back into the row. This layer reads the result, one"
            " row per token (n × d_model).")


def altup_meaning(layer: int) -> str:
    return (f"X is what layer {layer}'s attention reads in Gemma 3n: its residual stream is four copies of d_model"
            " (AltUp, Baykal et al. 2023); before each layer a router mixes them into predictions, and the layer runs"
            " on the first one only, RMS-normed by the layer's input norm. That normed prediction is X, one row per"
            f" token (n × d_model), computed by running layers 0 … {layer - 1} in NumPy as transformers does"
            " (with LAuReL and the per-layer inputs); so X is already normed and no Norm stage follows."
            if layer else
            "X is what layer 0's attention reads in Gemma 3n: the token embeddings × √d_model and three projections"
            " of them (AltUp's four copies of the stream), mixed by the layer's router into a prediction and"
            " RMS-normed by its input norm, one row per token (n × d_model); so X is already normed and no Norm"
            " stage follows.")


class Embed(StageSpec):
    stage = STAGE
    matrices = ("X", "context_X")

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        sc = trace.comp.scenario
        return [Plan("X", sc.n, sc.X.shape[1], per_row=True)]

    def named(self, trace: TraceContext) -> Stage:
        return self.stage if trace.comp.scenario.input.is_embedding else INPUT_STAGE

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        sc = trace.comp.scenario
        text = self.stage.meaning
        entered = ask.scenario_says(sc, "position_enters")  # where a table brings position in, in words
        nope = sc.input.schedule[sc.input.chosen_layer].endswith("no-rope") if sc.input.schedule else False
        if sc.input.kind == "residual":
            assert sc.input.layer is not None
            rotated_elsewhere = any(e.endswith("no-rope") for e in sc.input.schedule)  # a NoPE layer of a RoPE model
            # what each earlier layer added, where the schedule's one-sub-layer blocks (Nemotron-H) or a table say
            adds = single_adds(sc.input.schedule, sc.input.layer) or ask.scenario_says(sc, "residual_adds")
            text = residual_meaning(sc.input.layer, learned_positions=entered is None and not rotated_elsewhere
                                    and adds is None, adds=adds)
        elif sc.input.kind == "altup":
            assert sc.input.layer is not None
            text = altup_meaning(sc.input.layer)
        elif sc.input.kind == "embedding+position":
            text = EMBED_POSITION_MEANING
        elif sc.input.kind == "embedding+position+type":
            text = EMBED_TYPE_MEANING
        if entered is not None:
            text += entered
        elif nope:
            text += (" This layer applies no RoPE, though the model's other layers do (a NoPE layer): its scores see"
                     " position only through what earlier layers wrote into X, and through the mask.")
        return text

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        sc = trace.comp.scenario
        token, spelt = sc.labels[row], sc.tokens[row]  # ▁the₂ is the second "▁the"; its embedding is the token's
        x = sc.X[row]
        integral = trace.integral("X", None)
        # a real model's row has hundreds of numbers: the line keeps its ends; the X pane holds them all
        values = "[" + elide([fmt(float(v), integral, d) for v in x], ", ") + "]"
        given = sc.input
        if given.kind == "residual":
            what = f'residual stream entering layer {given.layer} at "{token}"'
        elif given.kind == "altup":
            what = f'normed AltUp prediction entering layer {given.layer} at "{token}"'
        elif given.kind == "embedding+position":
            what = f'embedding of "{spelt}" + embedding of position {row}'
        elif given.kind == "embedding+position+type":
            what = f'LayerNorm(embedding of "{spelt}" + embedding of position {row} + embedding of type 0)'
        else:
            what = f'embedding of "{spelt}"'
        text = f"X[{token}] = {what} = {values}"
        return Operation(index, seg, row, None, None, (), text)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return trace.comp.scenario.X if name == "X" else trace.comp.scenario.X_kv

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        inputs: list[Key] = [("X", None)]
        return [*inputs, ("context_X", None)] if trace.comp.scenario.is_cross else inputs

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("X", None)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return x_title(trace.comp.scenario) if name == "X" else "X_ctx (context)"

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        if op.segment.stage != self.stage.key:  # X itself is named only while it is being read in
            return []
        return [FormulaPart(INPUT, "X → ", alone=True)]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({INPUT})

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        out = [page.table("X", None), ""]
        if page.trace.comp.scenario.is_cross:
            out += ["The context's embeddings (Keys and Values are built from these):", "",
                    page.table("context_X", None, "X_ctx"), ""]
        return out

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        sc = chain.sc
        tokens, keys = sc.labels, sc.key_labels
        out = [Table("X", "X", x_title(sc), "embed", None, sc.X, tokens, idx(sc.X.shape[1]), True, False)]
        if sc.context_X is not None:
            out.append(Table("context_X", "X_ctx", "X_ctx (the context's embeddings)", "embed", None, sc.context_X,
                             keys, idx(sc.context_X.shape[1]), True, False))
        positions = sc.positions
        if positions is not None and ask.scenario_says(sc, "position_enters") is not None:
            out.append(Table("positions", "position", "Positions (RoPE and ALiBi read these)", "embed", None,
                             np.array([positions], dtype=np.float64), ("p",), tokens, True, False))
        return out


SPEC = Embed()


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """A copy: each token's row (of the embedding table, or of the residual stream) read, and written as X."""
    from qkv_tui.core.cost import B, Count, fig, term

    row = (ph.R, ("d_model", int(sc.X.shape[1])), B(ph))
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name, read=fig(term("rows", *row)), written=fig(term("X", *row)))


class EmbedBack(BackwardSpec):
    """The gradient at what the projections read (X̂, or X without a norm): the sum of its paths."""

    stage = Stage("dembed", "dEmbed",
                  "Back to the input. Each row of X fed three projections (and the gate, where there is one), so its"
                  " gradient is the sum of what came back along each path: dX = dQ·W_Qᵀ + dK·W_Kᵀ + dV·W_Vᵀ, summed"
                  " over the heads. X is data, not a weight: training never changes it, but dX is what an earlier"
                  " layer would receive.")
    matrices = ("dX_in",)

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        sc = trace.comp.scenario
        own = _own_embed(sc)
        text = self.stage.meaning if own is None else own.EMBED_MEANING
        x = "X" if sc.norm is None else "X̂"
        if sc.norm is not None:  # the projections read X̂: this stage ends at dX̂, and dNorm takes it on to dX
            text = text.replace("Back to the input. Each row of X", "Back to X̂, the normalised X. Each row of X̂")
            text = text.replace(" dX = ", " dX̂ = ").replace(
                "X is data, not a weight: training never changes it, but dX is what an earlier layer would receive.",
                "This is dX̂, the gradient at the norm's output; dNorm next carries it back through the norm to dX"
                " (X is data, not a weight: training never changes it, but dX is what an earlier layer would receive).")
        if sc.is_cross:
            text += (" Under cross-attention K and V read the context, so only the Query path (and the gate)"
                     f" reaches {x}.")
        roles = [role for role, _, _ in gate_paths(trace)]
        if roles:  # the line adds these paths: the words must not stop at three
            text += (" The gated delta rule's " + " and ".join(f"W_{r}" for r in roles) + f" read {x} too, so d{x} adds "
                     + " + ".join(f"d{r}·W_{r}ᵀ" for r in roles) + ".")
        return text

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return [Plan("dX_in", *trace.comp.X_in.shape)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        comp = trace.comp
        assert col is not None
        own = _own_embed(comp.scenario)
        if own is not None:  # a table's own projections read X (a latent layer's down-projections)
            cell: Operation = own.embed_cell(trace, index, seg, row, col, d)
            return cell
        g = grads(trace)
        name = "dX̂" if comp.norm is not None else "dX"
        q = comp.scenario.labels[row]
        a, b, paths = [], [], []
        for hr, hg in zip(comp.heads, g.heads, strict=True):
            parts = [("Q", hg.dQ, hr.W_Q)]
            if not comp.scenario.is_cross:
                parts += [("K", hg.dK, hr.W_K), ("V", hg.dV, hr.W_V)]
            named = [(role, role, grad, W) for role, grad, W in parts]
            for record in ask.answering(hr, "x_path"):  # a part that reads X too (the output gate)
                if (path := record.x_path(hg)) is not None:
                    named.append(path)
            for role, said_as, grad, W in named:
                a.append(grad[row])
                b.append(W[col])
                paths.append(f"d{said_as}[{q}]·W_{role}[{col},:]")
        said = f"{name}[{q},{col}] = " + (" + ".join(paths) if len(comp.heads) == 1 else "Σ heads (" + " + ".join(
            paths[:len(paths) // len(comp.heads)]) + ")")
        ints = all(trace.integral(f"W_{r}", h) for r in "QKV" for h in range(len(comp.heads)))
        for role, grad, W in gate_paths(trace):  # [deltanet]'s g and β computed from X̂ (every head at once)
            a.append(grad[row])
            b.append(W[col])
            said += f" + d{role}[{q}]·W_{role}[{col},:]"
            ints = ints and bool((np.round(W) == W).all())
        return dot_cell(trace, index, seg, row, col, d, float(g.dX_norm[row, col]), np.concatenate(a),
                        np.concatenate(b), False, ints, said,
                        tuple(Ref(f"W_{r}", h, col) for h in range(len(comp.heads)) for r in "QKV"))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if not has_backward(trace):
            raise KeyError(name)
        return grads(trace).dX_norm

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        sc = trace.comp.scenario
        own = _own_embed(sc)
        if own is not None:
            panes: list[Key] = own.embed_panes(trace)
            return panes
        keys: list[Key] = []
        for h in range(len(trace.comp.heads)):
            keys.append(("W_Q", h))
            if not sc.is_cross:
                keys += [("W_K", h), ("W_V", h)]
        return [*keys[:3], ("dX_in", None)]  # the first head's weights: more would not fit beside dX

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dX_in", None)] if has_backward(trace) else []

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        x = "X̂" if trace.comp.norm is not None else "X"
        return f"d{x} = Σ paths"


BACKWARD = EmbedBack()


def gate_paths(trace: TraceContext) -> list[tuple[str, Matrix, Matrix]]:
    """The paths into X̂ of what a scenario's table computes from X̂ for every head at once (the delta rule's g
    through W_a and β through W_b): each table's ``x_paths`` of the gradients."""
    g = grads(trace)
    return [path for table in ask.tables(trace.comp.scenario) if (said := getattr(table, "x_paths", None)) is not None
            for path in said(g)]


def _own_embed(sc: Scenario) -> ModuleType | None:
    """The stage module of a table whose own projections read X in the Q, K and V projections' place (a latent
    layer), which then says what dEmbed computes (``EMBED_MEANING``, ``embed_cell``, ``embed_panes``); None
    without one. It loads with a scenario that has the table."""
    module = ask.scenario_says(sc, "embed_back")
    return None if module is None else importlib.import_module(module)
