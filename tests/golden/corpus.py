"""What the corpus holds: for each scenario, its exports, and the app's text over a whole walk."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from qkv_tui.core.engine import Computation, compute
from qkv_tui.core.fmt import fmt
from qkv_tui.core.scenario import Scenario, builtin_names, load_scenario
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.display.view import Explanation, PaneSpec
from qkv_tui.edges.export_json import write_json
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.edges.worksheet.make import to_worksheet
from qkv_tui.teach.stepper import Position

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # the checkout: its path is replaced in every text, so any clone hashes alike
INPUTS = HERE / "inputs"
MANIFEST = HERE / "manifest.json"
# Walks are capped so the corpus stays a few seconds of work: a long trace's first and last
# operations and every stage boundary are kept, which is where the text of each stage lives.
WALK_CAP = 400
_NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?|-?\d+e[-+]?\d+")


def scenarios() -> Iterator[tuple[str, Scenario]]:
    """Every built-in by name, then the generated inputs in name order."""
    for name in builtin_names():
        yield f"builtin/{name}", load_scenario(name)
    for path in sorted(INPUTS.glob("*.toml")):
        yield f"generated/{path.stem}", load_scenario(path)


def _indices(comp: Computation, presenter: Presenter) -> list[int]:
    total = len(presenter.exact)
    if total <= WALK_CAP:
        return list(range(total))
    keep = set(range(50)) | set(range(total - 50, total))
    for run in presenter.exact.runs:
        keep |= {run.start, run.start + 1, run.stop - 1}
    step = max(1, total // (WALK_CAP - len(keep))) if len(keep) < WALK_CAP else total
    keep |= set(range(0, total, step))
    return sorted(i for i in keep if 0 <= i < total)


def _explanation(ex: Explanation) -> list[str]:
    lines = [f"{ex.stage_label} | {ex.counter} | {ex.head_label}", ex.arithmetic, *ex.details, ex.meaning,
             "".join(f"[{piece}]" if on else piece for piece, on in ex.formula),
             " ".join(f"{label}:{state}" for label, state in ex.stages)]
    return lines


def _pane(spec: PaneSpec) -> list[str]:
    lines = [f"# {spec.key}: {spec.title} / {spec.subtitle} (filled {spec.filled}, current {spec.current})",
             "  " + " ".join(spec.col_labels)]
    values = spec.values
    for r in range(values.shape[0]):
        cells = [fmt(float(values[r, c]), spec.integral, spec.decimals) if spec.is_filled(r, c) else "·"
                 for c in range(values.shape[1])]
        lines.append(f"  {spec.row_labels[r] if r < len(spec.row_labels) else r} " + " ".join(cells))
    return lines


def _walk(comp: Computation, modes: Modes, panes: bool = True) -> str:
    presenter = Presenter(comp)
    out: list[str] = []
    heads = len(comp.heads)
    for index in _indices(comp, presenter):
        for head in sorted({0, heads - 1}):
            screen = presenter.frame(Position(index, head), modes)
            out.append(f"== op {index} head {head}")
            out += _explanation(screen.explanation)
            out += list(screen.notes)
            if screen.description:
                out.append(screen.description)
            for spec in screen.focus if panes else ():
                out += _pane(spec)
    return "\n".join(out) + "\n"


def _side(comp: Computation, side: str) -> str:
    presenter = Presenter(comp)
    modes = Modes(view=side)
    steps = presenter.side_steps(modes, 0)
    out: list[str] = []
    for step in sorted(set(range(min(steps, 60))) | {steps - 1}):
        screen = presenter.frame(Position(0, 0), Modes(view=side, side_step=step))
        out.append(f"== step {step}")
        out += _explanation(screen.explanation)
        for spec in screen.focus:
            out += _pane(spec)
    return "\n".join(out) + "\n"


def _json(sc: Scenario) -> str:
    buf = io.StringIO()
    write_json(sc, buf)
    return buf.getvalue()


def rounded_json(text: str) -> str:
    """The JSON with every number at 8 significant digits: what another CPU's summation order keeps."""
    def canon(value: object) -> object:
        if isinstance(value, float):
            return float(f"{value:.8g}") if value == value else value
        if isinstance(value, list):
            return [canon(v) for v in value]
        if isinstance(value, dict):
            return {k: canon(v) for k, v in value.items()}
        return value
    return json.dumps(canon(json.loads(text)), sort_keys=True)


def outputs(sc: Scenario) -> dict[str, Callable[[], str]]:
    """Every output of one scenario, each computed when asked for."""
    comp = compute(sc)
    return {
        "json": lambda: _json(sc),
        "markdown": lambda: to_markdown(comp),
        "toml": lambda: to_toml(sc),
        "worksheet": lambda: to_worksheet(comp),
        "walk": lambda: _walk(comp, Modes()),
        "walk-hand": lambda: _walk(comp, Modes(hand=True), panes=False),
        "walk-5dp": lambda: _walk(comp, Modes(decimals=5), panes=False),
        "cache": lambda: _side(comp, "cache"),
        "tiles": lambda: _side(comp, "tiles"),
    }


def digest(kind: str, text: str) -> str:
    """The hash kept in the manifest: exact bytes, except JSON at 8 significant digits (see rounded_json)."""
    if kind == "json":
        text = rounded_json(text)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def render(sc: Scenario) -> dict[str, str]:
    """Every output's text; an output that raises is recorded as its error (part of what is frozen)."""
    texts: dict[str, str] = {}
    for kind, make in outputs(sc).items():
        try:
            text = make()
        except Exception as exc:
            text = f"raised {type(exc).__name__}: {exc}"
        texts[kind] = text.replace(f"{ROOT}{os.sep}", "")
    return texts


def render_all() -> Iterator[tuple[str, str, str]]:
    """(scenario, output kind, text) for the whole corpus."""
    for name, sc in scenarios():
        for kind, text in render(sc).items():
            yield name, kind, text
