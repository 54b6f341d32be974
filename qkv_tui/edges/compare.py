"""``--tensors FILE`` and ``--compare FILE`` on the command line: a learner's file made a scenario, and a
learner's results held against the engine's (core/diagnose.py) for the JSON report and the app."""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from qkv_tui.core.diagnose import GRADIENTS, Report, Stages, compare, diagnose, forward, matches, problem_of, refused
from qkv_tui.core.engine import Computation
from qkv_tui.core.scenario import Scenario, ScenarioError, scenario_from_data
from qkv_tui.core.tolerances import ATOL, RTOL
from qkv_tui.display.modes import Modes
from qkv_tui.edges.tensors import Reading, Stored, TensorError, read_arrays, read_inputs, read_results, results_named
from qkv_tui.teach.stepper import Position

DECIMALS = Modes().decimals  # the app's default; --decimals changes both


@dataclass
class Loaded:
    """A scenario from --tensors and how its file's axes read."""

    scenario: Scenario
    reading: Reading | None


def load_tensors(args: argparse.Namespace) -> Loaded:
    """The scenario of --tensors FILE; raises ScenarioError (one line)."""
    path = Path(args.tensors)
    try:
        stored = read_arrays(path)
        reading = read_inputs(stored, args.layout, args.batch)
    except TensorError as exc:
        raise ScenarioError(args.tensors, _strip(str(exc), path)) from None
    if args.compare is not None:  # said before a long sequence is computed, not after
        theirs = Path(args.compare)
        try:
            results_named(stored if theirs == path else read_arrays(theirs))
        except TensorError as exc:
            raise ScenarioError(args.compare, _strip(str(exc), theirs)) from None
    if reading.note and args.compare is None:  # with --compare the report's note says it
        sys.stderr.write(f"warning: {reading.note}\n")
    return Loaded(scenario_from_data(reading.doc, args.tensors, path.stem), reading)


def _strip(message: str, path: Path) -> str:
    """The file's name once: ScenarioError puts the path first already."""
    prefix = f"{path.name}: "
    return message[len(prefix):] if message.startswith(prefix) else message


def final_stage(comp: Computation) -> str:
    if comp.W_O is not None:
        return "W_O"
    return "Mix" if len(comp.heads) == 1 else "Concat"


def _gradients(comp: Computation) -> dict[str, np.ndarray] | None:
    """dV, dP, dS, dQ, dK of every head (a head axis first), where the scenario has a backward pass."""
    if comp.scenario.backward is None:
        return None
    from qkv_tui.core.gradients import gradients

    g = gradients(comp)
    return {"dV": np.stack([h.attend.dV for h in g.heads]), "dP": np.stack([h.attend.dP for h in g.heads]),
            "dS": np.stack([h.attend.dS for h in g.heads]), "dQ": np.stack([h.dQ for h in g.heads]),
            "dK": np.stack([h.dK for h in g.heads])}


def engine_stages(comp: Computation) -> Stages:
    heads = comp.heads
    return Stages(np.stack([h.scores for h in heads]), np.stack([h.scaled for h in heads]),
                  np.stack([h.weights for h in heads]), np.stack([h.output for h in heads]), comp.output,
                  comp.allow)  # the mask the heads attend with: a part's own (the indexer's selection) narrows it


def run_compare(args: argparse.Namespace, comp: Computation, reading: Reading | None) -> Report:
    """The report for --compare FILE; raises ScenarioError for a file that cannot be read as results."""
    report = _run_compare(args, comp, reading)
    if reading is not None and reading.note:  # an input read other than as saved: the report says so too
        report.note = reading.note + (f"; {report.note}" if report.note else "")
    return report


def _run_compare(args: argparse.Namespace, comp: Computation, reading: Reading | None) -> Report:
    path = Path(args.compare)
    sc = comp.scenario
    if (why := refused(sc)) is not None:  # a part whose map it does not model: one line, not wrong references
        raise ScenarioError(args.compare, why)
    heads = len(comp.heads)
    shapes = {"scores": comp.heads[0].scores.shape, "scaled": comp.heads[0].scaled.shape,
              "weights": comp.heads[0].weights.shape, "mix": comp.heads[0].output.shape, "final": comp.output.shape}
    if any(h.output.shape != comp.heads[0].output.shape for h in comp.heads):
        shapes["mix"] = (-1, -1)  # heads of different widths: only the final output can be compared
    grads = _gradients(comp)
    if grads is not None:
        shapes.update({key: value.shape[1:] for key, value in grads.items()})
    try:
        stored: Stored = read_arrays(path)
        results = read_results(stored, heads, None if reading is None else reading.batch,
                               None if reading is None else args.batch, shapes)
    except TensorError as exc:
        raise ScenarioError(args.compare, _strip(str(exc), path)) from None
    given = dict(results.stages)
    if results.final is not None:
        given["final"] = results.final
    rtol = RTOL if args.rtol is None else args.rtol
    atol = ATOL if args.atol is None else args.atol
    right = engine_stages(comp)
    right.grads = grads or {}
    report = compare(given, right, heads, final_stage(comp), rtol, atol)
    if report.agree:
        return report
    problem = problem_of(sc, direct=bool(reading and reading.direct),
                         per_head_weights=bool(reading and reading.per_head_weights),
                         dtype=results.dtype, allow=comp.allow)
    if isinstance(problem, str):
        report.note = problem
        return report
    forward_keys = [k for k in given if k not in GRADIENTS]
    if not matches({k: forward(problem).get(k) for k in forward_keys}, right, RTOL, ATOL, nan_equal=False):
        report.note = "the mistakes were not tried: this scenario's right computation is not plain attention"
        return report
    report.diagnosis = diagnose(problem, given, rtol, atol)
    if not report.diagnosis and report.first is not None and report.first.stage.startswith("d"):
        report.note = "your forward pass agrees; the mistakes are tried on the forward pass, not on the gradients"
    elif not report.diagnosis:
        report.note = "no known mistake, alone or with one other, gives your numbers; the first difference is above"
    return report


_READINGS: dict[int, Reading] = {}  # how each --tensors scenario's file read, by the scenario's id


def tensors_loader(args: argparse.Namespace) -> Callable[[str], Scenario]:
    def load(_spec: str) -> Scenario:
        loaded = load_tensors(args)
        if loaded.reading is not None:
            _READINGS[id(loaded.scenario)] = loaded.reading
        return loaded.scenario

    return load


def export_compare(args: argparse.Namespace, scenario: Scenario, exporter: Callable[[Scenario, TextIO], None],
                   out: TextIO) -> int:
    """``--export json --compare FILE``: the export with its "compare" member; 0 when all agrees, else 1."""
    from qkv_tui.edges.arithmetic import computed

    comp = computed(scenario)
    report = run_compare(args, comp, _READINGS.get(id(scenario)))
    write_report(exporter, scenario, report, out)
    for line in summary(report, scenario):  # --decimals is the app's alone: the default here
        sys.stderr.write(line + "\n")
    return 0 if report.agree else 1


def app_place(args: argparse.Namespace, comp: Computation) -> tuple[Position | None, str]:
    """Where the app opens for --compare (the first cell that differs; None: all agree) and the notice it shows."""
    from qkv_tui.teach.trace import Trace

    report = run_compare(args, comp, _READINGS.get(id(comp.scenario)))
    decimals = getattr(args, "decimals", None)  # tests call this with a namespace of the compare options only
    lines = summary(report, comp.scenario, DECIMALS if decimals is None else decimals)
    if report.first is None:
        return None, "\n".join(lines)
    f = report.first
    target = {"Score": "scores", "Scale": "scaled", "Softmax": "weights", "Mix": "output", "Concat": "concat",
              "W_O": "final", "dSoftmax": "dS", "dMix": f.key, "dScore": f"{f.key}_s"}[f.stage]
    if f.stage == "Mix" and report.stages and report.stages[-1][0] == "Mix" and len(comp.heads) == 1:
        target = "output"
    trace = Trace(comp)
    head = None if target in ("concat", "final") else f.head
    seg = trace.segment_for(target, head)
    if seg is None:
        return None, "\n".join(lines)
    index = seg.start + (f.row if seg.per_row else f.row * seg.cols + f.col)
    return Position(index, 0 if head is None else head), "\n".join(lines)


def write_report(write_export: object, scenario: Scenario, report: Report, out: TextIO) -> None:
    """The JSON export with the report as its last member, "compare"."""
    buffer = io.StringIO()
    write_export(scenario, buffer)  # type: ignore[operator]
    text = buffer.getvalue().rstrip()
    assert text.endswith("}")
    out.write(text[:-1].rstrip() + ',\n  "compare": ' + json.dumps(report.as_json()) + "\n}\n")


def shown(yours: float, correct: float, decimals: int = DECIMALS) -> tuple[str, str]:
    """The two numbers at the app's decimals, or at as many more as tell them apart: the full repr
    (0.07828846573829651) wraps the app's notice at 80 columns; the JSON keeps every digit."""
    for places in range(decimals, 13):
        a, b = (_fixed(x, places) for x in (yours, correct))
        if a != b:
            return a, b
    return repr(float(yours)), repr(float(correct))


def _fixed(x: float, places: int) -> str:
    if not math.isfinite(x):
        return {math.inf: "inf", -math.inf: "-inf"}.get(x, "nan")
    text = f"{x:.{places}f}"
    return "0." + "0" * places if text == "-0." + "0" * places else text


def summary(report: Report, sc: Scenario, decimals: int = DECIMALS) -> list[str]:
    """The report in words, a line each, as the app names things: heads from 1, cells by their row and
    column labels (weights[t0,t1]), numbers at the app's decimals; for standard error beside the JSON,
    and the app's notice."""
    def stages(agreeing: bool) -> str:
        heads: dict[int, list[str]] = {}
        final = []
        for stage, h, ok in report.stages:
            if ok == agreeing:
                if stage in ("W_O", "Concat"):  # shared by every head
                    final.append(stage)
                else:
                    heads.setdefault(h, []).append(stage)
        if len(sc.heads) == 1:
            return ", ".join(heads.get(0, []) + final)
        return "; ".join([f"{', '.join(names)} (head {h + 1})" for h, names in heads.items()] + final)

    if report.agree:
        return [f"agree: every stage you gave matches: {stages(True)}"]
    f = report.first
    assert f is not None
    keyed = f.stage in ("Score", "Scale", "Softmax")
    cell = f"[{sc.labels[f.row]},{sc.key_labels[f.col] if keyed else f.col}]"
    head = f" of head {f.head + 1}" if len(sc.heads) > 1 and f.stage not in ("W_O", "Concat") else ""
    yours, correct = shown(f.yours, f.correct, decimals)
    lines = [f"differs: {f.stage}{head} {cell}: yours {yours}, correct {correct}"]
    if any(ok for _s, _h, ok in report.stages):
        lines.append(f"agree: {stages(True)}")
    lines.append("diagnosis: " + (", ".join(report.diagnosis) if report.diagnosis else "none"))
    if report.note:
        lines.append(f"note: {report.note}")
    return lines
