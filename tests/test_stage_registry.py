"""The stages are a registry of modules: the trace and the screen model walk it, so a new stage is one module."""

from __future__ import annotations

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import Matrix
from qkv_tui.display.view import View
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.edges.worksheet.make import build
from qkv_tui.teach import stages
from qkv_tui.teach.quiz import questions
from qkv_tui.teach.stages.common import Key, Operation, Plan, Ref, Segment, Stage, StageSpec
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table
from qkv_tui.teach.stepper import Position, Stepper
from qkv_tui.teach.trace import STAGES, Trace

from .conftest import SHIPPED

SEED_ORDER = ["embed", "norm", "index", "select",  # [indexer]: once for the layer, before any head projects
              # "reuse": [shared_kv], K and V read from an earlier layer after Project computes Q
              "project", "reuse", "compress", "expand", "mla_rotate", "qk_norm", "rotate",
              "rotate_blocks",  # [rope] on each block a score reads (a differential head's halves)
              "score", "scale", "softmax",
              "mix",
              "ssd_steps", "ssd_recurrence", "ssd_mask", "ssd_map", "ssd_attention", "ssd_agree", "ssd_gate",
              "ssd_norm",  # [ssd]: Project and Score … Mix
              "diff_score_1", "diff_scale_1", "diff_softmax_1", "diff_score_2", "diff_scale_2", "diff_softmax_2",
              "diff_lambda", "diff_subtract", "diff_mix", "diff_subnorm", "diff_factor",  # [differential]: Score … Mix
              "absorb",
              "phi", "quadratic", "recurrent", "conv", "l2norm", "gates", "delta", "onorm",  # [linear], [deltanet]: Score … Mix
              "gate", "concat", "wo"]
# the backward pass after the forward stages ([backward]; docs/backward.md), last forward stage first
SEED_ORDER += ["loss", "dwo", "dgate", "dmix",
               "dlinear", "ddelta", "dgates",  # [linear], [deltanet] in place of dMix … dScore
               "dsoftmax", "dscale", "dscore", "drotate",
               "ddiff_factor", "ddiff_subnorm", "ddiff_mix", "ddiff_subtract", "ddiff_lambda", "ddiff_softmax_1",
               "ddiff_scale_1", "ddiff_softmax_2", "ddiff_scale_2", "ddiff_score",  # [differential]
               "dmla_rotate", "dk_r", "dexpand", "dcompress",  # [mla]'s latent layer, read backwards
               "drotate_blocks",  # [rope] on each block, read back (after the stages placed after dRotate)
               "dqk_norm", "dproject", "dembed", "dnorm"]


def test_every_registered_stage_has_a_name_a_meaning_and_a_builder() -> None:
    assert [s.stage.key for s in stages.REGISTRY] == SEED_ORDER
    for spec in stages.REGISTRY:
        assert spec.stage.name and len(spec.stage.meaning) > 40, spec.stage.key
        # its own segments and operations, not the base class's placeholders
        assert type(spec).segments is not StageSpec.segments, spec.stage.key
        assert type(spec).operation is not StageSpec.operation, spec.stage.key
        assert stages.spec(spec.stage.key) is spec and STAGES[spec.stage.key] is spec.stage


def test_a_built_in_scenarios_stages_come_from_the_registry_in_order() -> None:
    for name in SHIPPED:  # the real models' heads too
        trace = Trace(compute(load_scenario(name)))
        assert trace.stage_keys == [s.stage.key for s in stages.REGISTRY if s.runs(trace)], name
        assert [s.stage.key for s in trace.specs] == trace.stage_keys
        # each stage appears in one block of runs per head (or once), in registry order within a head
        order = {key: i for i, key in enumerate(trace.stage_keys)}
        for h in range(len(trace.comp.heads)):
            mine = [r.stage for r in trace.runs if r.head in (None, h)]
            assert mine == sorted(mine, key=order.__getitem__), (name, h)
            assert set(mine) == set(trace.stage_keys), (name, h)


class Hold(StageSpec):
    """A toy pass-through stage after Mix: each output cell copied into ``held``, per head."""

    stage = Stage("hold", "Hold", "A pass-through stage for the test: each output cell is held as it is.")
    per_head = True
    matrices = ("held",)

    def segments(self, trace: Trace, head: int | None) -> list[Plan]:
        assert head is not None
        return [Plan("held", trace.comp.scenario.n, trace.comp.heads[head].d_v)]

    def operation(self, trace: Trace, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        assert seg.head is not None and col is not None
        value = float(trace.comp.heads[seg.head].output[row, col])
        q = trace.comp.scenario.labels[row]
        text = f"held[{q},{col}] = out[{q},{col}] = {trace.formatted('output', seg.head, value, d)}"
        return Operation(index, seg, row, col, value, (Ref("output", seg.head, row, col),), text)

    def matrix(self, trace: Trace, name: str, head: int | None) -> Matrix:
        assert head is not None
        return trace.comp.heads[head].output

    def panes(self, trace: Trace, op: Operation) -> list[Key]:
        return [("output", op.head), ("held", op.head)]

    def overview(self, trace: Trace, head: int) -> list[Key]:
        return [("held", head)]

    def title(self, trace: Trace, name: str, head: int | None) -> str:
        return "held = out"

    # its Markdown section is the default one (its table, its worked lines); on the worksheet, a copy of the output

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        out = chain.printed[f"output.{head}"]
        return [Table(f"held.{head}", "held", "held = output", "hold", head, out.values, out.rows, out.cols, False, True)]

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        return f"held[{table.rows[row]},{col}] = output[{table.rows[row]},{col}] = {cells.txt(f'output.{table.head}', row, col)}"


def test_a_stage_registered_in_a_test_runs_in_the_trace_and_on_the_screen() -> None:
    plain = Trace(compute(load_scenario("two_heads")))
    with stages.registered(Hold(), after="mix"):
        assert "hold" in STAGES
        trace = Trace(compute(load_scenario("two_heads")))
        n, heads = trace.comp.scenario.n, trace.comp.heads
        assert trace.stage_keys == [*plain.stage_keys[:6], "hold", *plain.stage_keys[6:]]
        assert len(trace) == len(plain) + sum(n * h.d_v for h in heads)
        # head after head: Project … Mix, then Hold, for each head before Concat
        assert [r.stage for r in trace.runs if r.head == 1][-2:] == ["mix", "hold"]
        run = next(r for r in trace.runs if r.stage == "hold" and r.head == 1)
        op = trace.op(run.start + 1)
        want = float(heads[1].output[0, 1])
        assert op.value == want and op.arithmetic.startswith(f"held[{trace.comp.scenario.labels[0]},1] = out[")
        assert op.stage.name == "Hold" and trace.meaning("hold", 1).startswith("A pass-through")

        # the screen model: the stage bar, the stage label, the panes and their titles, the overview, the quiz
        view = View(trace)
        pos = Stepper(trace).stage(Position(0, 1), 7)
        assert pos.index == next(r.start for r in trace.runs if r.stage == "hold" and r.head == 1)
        ex = view.explain(pos)
        assert ex.stage_label == f"7/{len(trace.stage_keys)} Hold"
        assert ("7 Hold", "current") in ex.stages and ex.arithmetic.startswith("held[")
        assert not any(lit for _, lit in ex.formula)  # it computes no part of softmax(QKᵀ/√dₖ)V
        focus, extra = view.panes(pos, overview=True)
        assert [p.key for p in focus] == ["output@1", "held@1"]
        assert focus[1].title == f"held = out  {n}×{heads[1].d_v}" and focus[1].current == (0, 0)
        assert ("held", 1) in view.overview_keys(pos) and "held@1" not in [p.key for p in extra]  # shown once
        assert [q.kind for q in questions(trace, pos.index, 3)] == ["value"]
        # the other stages are as before: their operations read the same
        for index in (0, plain.runs[5].start, len(plain) - 1):
            shift = sum(n * h.d_v for h in heads) if index == len(plain) - 1 else 0
            assert trace.op(index + shift).arithmetic == plain.op(index).arithmetic
    assert "hold" not in STAGES and [s.stage.key for s in stages.REGISTRY] == SEED_ORDER
    assert Trace(compute(load_scenario("two_heads"))).stage_keys == plain.stage_keys


def test_a_stage_registered_in_a_test_appears_in_the_markdown_export_and_on_the_worksheet() -> None:
    comp = compute(load_scenario("two_heads"))
    plain_md, plain_ws = to_markdown(comp), build(comp, "100%")
    with stages.registered(Hold(), after="mix"):
        md, ws = to_markdown(comp), build(comp, "100%")
    sc, heads = comp.scenario, comp.heads
    first = sc.labels[0]
    # the Markdown page: a section per head after Mix, numbered in the walk, with its table and its worked lines
    for head in heads:
        section = md.split(f"## {head.name}\n")[1].split("\n## ")[0]
        assert section.index("### 6 · Mix") < section.index("### 7 · Hold"), head.name
        hold = section.split("### 7 · Hold\n\n")[1].split("\n")
        assert hold[0].startswith("A pass-through stage") and hold[2].startswith("| held "), head.name
        assert any(line.startswith(f"    held[{first},0] = out[{first},0] = ") for line in hold), head.name
    assert "## 8 · Concat" in md and "## 7 · Concat" in plain_md
    # the worksheet: a Hold section per head, its cells blanks like any computed table's, worked from the page
    for h, head in enumerate(heads):
        assert f"## Hold ({head.name})\n\nheld = output:" in ws.markdown()
        assert ws.table(f"held.{h}").values is ws.table(f"output.{h}").values
    lines = [b.working for b in ws.blanks if b.table.startswith("held.")]
    assert len(lines) == sum(sc.n * head.d_v for head in heads)
    assert lines[0] == f"held[{first},0] = output[{first},0] = {ws.table('output.0').text(0, 0, 3)}"
    # everything else is as before
    assert [t.key for t in ws.tables if t.stage != "hold"] == [t.key for t in plain_ws.tables]
    assert "hold" not in STAGES and to_markdown(comp) == plain_md
