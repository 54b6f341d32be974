"""The live instrument: edit an input and watch everything downstream change, undo, save, reload,
follow the file as a teacher edits it, open other scenarios, screenshots, autoplay, themes.

The app owns one Live; its actions are one-line calls into it. Editing itself is pure
(qkv_tui.core.cell_edit); this module swaps the app's computation and keeps the position.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from textual import events
from textual.app import SystemCommand
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer

from qkv_tui.base.fixed import fixed
from qkv_tui.core.engine import Computation, compute
from qkv_tui.core.scenario import Scenario, ScenarioError, builtin_dir, builtin_names, load_scenario, resolve
from qkv_tui.display.frame import Frame
from qkv_tui.display.side_views import SIDE_VIEWS, shown_for
from qkv_tui.display.view import PaneSpec, stage_key
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace
from qkv_tui.ui import themes
from qkv_tui.ui.session import Session

if TYPE_CHECKING:  # editing's module loads with the first edit, undo or save, not with the first screen
    from qkv_tui.core.cell_edit import InputCell

POLL_SECONDS = 1.0  # how often the file's modification time is compared (a stat call: cheap)
SPEEDS = (2.0, 1.0, 0.5, 0.25)  # seconds per step, slowest first
DEFAULT_SPEED = 1
FASTER, SLOWER = ("greater_than_sign", "full_stop"), ("less_than_sign", "comma")  # > or . / < or ,
FOOTER_ROOM = 100  # columns from which the footer also shows "^p palette" (below, it would hide "q quit")
FOOTER_ROOMY = 90  # columns from which the footer's keys get their full spacing (below, "q quit" would be cut)
ERROR_SECONDS = 24 * 3600  # an error stays on screen until it is fixed (or the next message replaces it)


@fixed
class Undo:
    """What one undo restores: the scenario and its computation before an edit, and the cell edited."""

    scenario: Scenario
    comp: Computation
    cell: InputCell


def file_of(scenario: Scenario) -> Path | None:
    """The file a scenario was loaded from, when there is one."""
    path = resolve(scenario.source)
    return path if path.is_file() else None


def is_builtin(path: Path) -> bool:
    try:
        return path.resolve().parent == builtin_dir().resolve()
    except (OSError, RuntimeError):  # a loop of links (Python 3.11 raises RuntimeError): not a built-in
        return False


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


class Live:
    """Edits, undo, save, reload and the rest, for one app."""

    def __init__(self, app: Session, theme: str | None = None) -> None:
        self.app = app
        self.path = file_of(app.scenario)
        self.stamp = _stamp(self.path) if self.path else None
        self.missing = False
        self.undo_stack: list[Undo] = []
        self.base = app.scenario  # the values as the file holds them (as read, or as saved): what "edited" measures
        self.dirty: list[InputCell] = []  # the cells whose value differs from the file's: what ctrl+s writes
        self.announced: tuple[int, int] | None = None  # the change on disk last announced while edits were pending
        self.failed: tuple[Path, tuple[int, int] | None] | None = None  # a file that would not open, watched until fixed
        self.changed_from: Computation | None = None  # marks what the last edit changed ...
        self.marked_at: Position | None = None  # ... until the position moves
        self.timer: Timer | None = None
        self.speed = DEFAULT_SPEED
        self.shot_names: set[str] = set()  # screenshot names given out (a file is written by a thread, later)
        self.speeds = SPEEDS  # seconds per step (tests slow them down so that only their own ticks count)
        self.theme = theme if theme in themes.THEMES else "dark"
        self.read_only = False  # --read-only: no edit starts, nothing is saved

    # --- set-up --------------------------------------------------------------------------

    def start(self) -> None:
        """On mount: the theme (its colours are qkv.tcss's), and the watch on the file."""
        self.app.theme = themes.THEMES[self.theme]
        self.app.set_interval(POLL_SECONDS, self.poll)  # a stat call a second; nothing when there is no file

    # --- what the screen shows --------------------------------------------------------------

    def fit_footer(self) -> None:
        """The footer for the width: narrow, the step, help and quit keys come first (no palette key, tighter spacing)."""
        width = self.app.term.width  # the resize event's size: self.app.size lags one resize behind
        wide = width >= FOOTER_ROOM
        for footer in self.app.query(Footer):
            if footer.show_command_palette != wide:
                footer.show_command_palette = wide
                footer.refresh(recompose=True)  # the footer composes its keys only when the bindings change
            if footer.compact != (width < FOOTER_ROOMY):
                footer.compact = width < FOOTER_ROOMY

    def mark(self, screen: Frame) -> Frame:
        """Mark the cells the last edit changed, until the next step."""
        if self.changed_from is None:
            return screen
        if self.marked_at is None:  # the first frame since the edit: the marks stay while the position does
            self.marked_at = self.app.position
        elif self.marked_at != self.app.position:
            self.changed_from = self.marked_at = None
            return screen
        old = Trace(self.changed_from)
        return replace(screen, focus=[self._marked(p, old) for p in screen.focus],
                       extra=[self._marked(p, old) for p in screen.extra])

    @staticmethod
    def _marked(spec: PaneSpec, old: Trace) -> PaneSpec:
        name, _, head_text = spec.key.partition("@")
        head = None if head_text in ("", "None") else int(head_text)
        try:
            before = old.matrix("K" if name == "KT" else name, head)
        except (KeyError, IndexError):
            return spec
        if name == "KT":
            before = before.T
        if before.shape != spec.values.shape:
            return spec
        with np.errstate(invalid="ignore"):
            differs = ~((before == spec.values) | (np.isnan(before) & np.isnan(spec.values)))
        cells = frozenset((int(r), int(c)) for r, c in np.argwhere(differs))
        return replace(spec, changed=cells) if cells else spec

    def toasts(self) -> int:
        """How many toasts are on screen (Textual's Toast widgets: escape closes them before it reveals)."""
        return len(self.app.screen.query("Toast"))

    def flags(self) -> list[str]:
        flags = []
        if self.dirty:
            flags.append("edited")
        if self.timer is not None:
            flags.append(f"▶ {1 / self.speeds[self.speed]:g}/s")
        return flags

    # --- edit, undo, save ---------------------------------------------------------------------

    def default_cell(self) -> InputCell:
        """The input cell the current operation reads (the first one), or the current row's first X."""
        from qkv_tui.core.cell_edit import InputCell

        app = self.app
        op = app.trace.op(app.position.index)
        own = app.trace.spec(op.segment.stage).edit_cell(app.trace, op)  # a stage's own input: the gate's weights
        if own is not None:
            return own
        for ref in op.operands:
            if ref.matrix in ("X", "context_X"):
                return InputCell(ref.matrix, None, ref.row or 0, 0)
            if ref.matrix in ("W_Q", "W_K", "W_V", "W_O"):
                return InputCell(ref.matrix, ref.head, 0, ref.col or 0)
        if op.segment.stage == "embed":
            return InputCell("X", None, op.row, 0)
        if op.segment.stage == "wo":
            return InputCell("W_O", None, 0, op.col or 0)
        row = op.row if op.segment.target not in ("K", "V") else 0
        return InputCell("X", None, min(row, app.scenario.n - 1), 0)

    def edit(self) -> None:
        from qkv_tui.ui.edit_prompt import EditScreen  # the prompts load when first asked for, not at start-up

        if self.refused("editing"):
            return
        self.app.push_screen(EditScreen(self.app.scenario, self.default_cell(), self.apply))

    def refused(self, what: str) -> bool:
        """Under --read-only (a lecture: everyone sees the same numbers): says so in one line, and True."""
        if self.read_only:
            self.app.notify(f"Read-only: {what} is off.", severity="warning", timeout=4, markup=False)
        return self.read_only

    def apply(self, cell: InputCell, text: str) -> str | None:
        """Make one edit; returns why it cannot be made, or None."""
        from qkv_tui.core.cell_edit import EditError, changed_cells, edit, input_cells, value_of

        app = self.app
        if cell not in input_cells(app.scenario):  # the file was reloaded while the prompt was open
            return "the scenario changed on disk meanwhile; press esc, then e again"
        try:
            scenario, comp = edit(app.scenario, cell, text)
        except EditError as exc:
            return str(exc)
        if value_of(scenario, cell) == value_of(app.scenario, cell):  # enter on the value as it was: no edit
            return None
        self.undo_stack.append(Undo(app.scenario, app.comp, cell))
        self.dirty = changed_cells(self.base, scenario)  # an edit back to the file's value is no edit
        self.changed_from, self.marked_at = app.comp, None
        app.install(scenario, comp)
        return None

    def undo(self) -> None:
        from qkv_tui.core.cell_edit import changed_cells

        app = self.app
        if not self.undo_stack:
            app.notify("Nothing to undo.", timeout=3)
            return
        last = self.undo_stack.pop()
        self.dirty = changed_cells(self.base, last.scenario)  # every edit undone: the file's values, not "edited"
        self.changed_from, self.marked_at = app.comp, None
        app.install(last.scenario, last.comp)
        app.notify(f"Undone: {last.cell.label(last.scenario)}", timeout=3)

    def save(self) -> None:
        """Write the edits into the file; a built-in is never written over: the edited copy goes to the current folder.

        In a browser (``--serve``) nothing is written on the server: the edited file is a download.
        """
        from qkv_tui.core.cell_edit import EditError, save_file

        app = self.app
        if self.refused("saving"):
            return
        if self.path is None:
            app.notify("This scenario has no file to write to.", severity="warning", timeout=6)
            return
        if not self.dirty:
            app.notify("No edits to save.", timeout=3)
            return
        if app.is_web:
            self.download(self.path)
            return
        source, target = self.path, self.path
        if is_builtin(self.path):
            target = Path.cwd() / self.path.name
            if target.exists():
                app.notify(f"{self.path.stem} is built in and is never written over, and {target} exists already:"
                           f" open that file (qkv-tui {target.name}) to edit it.", severity="warning", timeout=12)
                return
        merged = target == source and _stamp(source) != self.stamp  # changed on disk since it was read
        if merged and (problem := self._merge_problem(source)):
            # this error says all the announcement of the change would: the file watch must not replace it with that
            self.announced = _stamp(source)
            app.notify(f"error: {target}: not saved: {problem}", severity="error", timeout=ERROR_SECONDS, markup=False)
            return
        try:
            save_file(source, target, app.scenario, self.dirty)  # never blocks, never half-written
        except EditError as exc:
            app.notify(f"error: {target}: not saved: {exc}", severity="error", timeout=12, markup=False)
            return
        self.path = target  # from now on the app follows the file it wrote
        self.stamp = _stamp(target)  # our own write is not a change to reload
        count = len(self.dirty)
        self.base, self.dirty = app.scenario, []
        edits = f"{count} edit{'s' if count != 1 else ''}"
        if merged:  # the file's own changes are in it too now: show the file as it is
            self.reload()
            app.notify(f"Saved {edits} into {target}, which had changed on disk: its changes are kept and shown.", timeout=8)
        elif target != source:
            app.notify(f"{source.stem} is built in and is never written over: saved {edits} to a copy, {target};"
                       " the app follows that file now.", timeout=10)
        else:
            app.notify(f"Saved {edits} to {target}", timeout=4)
        app.redraw()

    def download(self, source: Path) -> None:
        """The edited file, as ``s`` delivers a screenshot: a download in the student's browser. The
        server's folders are shared by every student and every restart: nothing is written into them."""
        from qkv_tui.core.cell_edit import EditError, edited_text

        app = self.app
        if _stamp(source) != self.stamp and (problem := self._merge_problem(source)):
            self.announced = _stamp(source)  # as save: the file watch must not replace this error with its notice
            app.notify(f"error: {source.name}: not downloaded: {problem}", severity="error", timeout=12, markup=False)
            return
        try:
            text = edited_text(source, app.scenario, self.dirty)  # read as save reads: never a blocking open
        except EditError as exc:
            app.notify(f"error: {source.name}: not downloaded: {exc}", severity="error", timeout=12, markup=False)
            return
        app.deliver_text(io.StringIO(text), save_filename=source.name, open_method="download",
                         mime_type="application/toml", name="scenario")
        count = len(self.dirty)
        app.notify(f"Downloading {source.name} with your {count} edit{'s' if count != 1 else ''} (the server's copy"
                   " stays as it is, for everyone).", timeout=6, markup=False)

    def _merge_problem(self, path: Path) -> str | None:
        """Why the edits cannot be written into a file that changed on disk, or None when they can."""
        from qkv_tui.core.cell_edit import input_cells

        try:
            on_disk = load_scenario(str(path))
        except ScenarioError as exc:
            return f"it changed on disk and has a problem now ({exc.message}); fix it, or reload (r) to drop your edits"
        if input_cells(on_disk) != input_cells(self.base):
            return ("it changed on disk and its inputs have other shapes now, so your edits have no place in it;"
                    " r reloads it (your edits are lost)")
        return None

    # --- reload and the file watch -------------------------------------------------------------

    def poll(self) -> None:
        if not self.app.ready:  # quitting: no reload into widgets on their way out
            return
        self.watch_failed()
        if self.path is None:
            return
        stamp = _stamp(self.path)
        if stamp is None:
            if not self.missing:
                self.missing = True
                self.error(f"error: {self.path}: the file is gone (deleted or renamed); the last good state stays on screen")
            return
        if self.missing or stamp != self.stamp:
            if self.dirty:  # as an editor does: a change on disk never replaces unsaved edits by itself
                self.announce(stamp)
                return
            self.reload()

    def announce(self, stamp: tuple[int, int]) -> None:
        """Say once per change on disk that the unsaved edits are kept, and what r and ctrl+s would do."""
        if self.announced == stamp or self.path is None:
            return
        self.announced = stamp
        count = len(self.dirty)
        self.app.clear_notifications()
        self.app.notify(f"{self.path.name} changed on disk, but the screen keeps your {count} unsaved"
                        f" edit{'s' if count != 1 else ''} and does not show the change: r reloads the file (it asks"
                        " first), ctrl+s writes your edits into it.", severity="warning", timeout=ERROR_SECONDS, markup=False)

    def reload(self, confirmed: bool = False) -> None:
        """Read the file again; a bad file shows its error and the last good computation stays.

        With unsaved edits it asks first, naming what would be lost (r or y reloads, escape keeps them).
        """
        app = self.app
        if self.path is None:
            app.notify("This scenario has no file to reload.", timeout=4)
            return
        if self.dirty and not confirmed:
            from qkv_tui.ui.edit_prompt import ReloadScreen

            app.push_screen(ReloadScreen(f"Reload {self.path.name} from disk?", self.lost()), self._reload_answered)
            return
        self.stamp = _stamp(self.path)
        self.missing = self.stamp is None
        try:
            scenario = load_scenario(str(self.path))
            comp = compute(scenario)
        except ScenarioError as exc:
            self.error(f"error: {exc}")
            return
        dropped = len(self.dirty)
        self.undo_stack.clear()
        self.base, self.dirty, self.announced = scenario, [], None
        self.changed_from = None
        app.clear_notifications()
        app.install(scenario, comp)
        note = f"; {dropped} unsaved edit{'s' if dropped != 1 else ''} dropped" if dropped else ""
        app.notify(f"Reloaded {self.path.name}{note}", timeout=3)

    def _reload_answered(self, reload: bool | None) -> None:
        if reload and self.app.ready:
            self.reload(confirmed=True)

    def lost(self) -> list[str]:
        """The unsaved edits, each with the file's value: ``X[I,0] = 7 (the file: 1)``."""
        from qkv_tui.ui.edit_prompt import shown_value

        sc, base = self.app.scenario, self.base
        return [f"{c.label(sc)} = {shown_value(sc, c)} (the file: {shown_value(base, c)})" for c in self.dirty]

    def error(self, message: str) -> None:
        self.app.clear_notifications()
        self.app.notify(message, title="The file has a problem", severity="error", timeout=ERROR_SECONDS, markup=False)

    def open(self, spec: str, confirmed: bool = False) -> None:
        """Open another scenario (a built-in name or a file), from its first operation; asks first when
        that would drop unsaved edits."""
        app = self.app
        if self.dirty and not confirmed:
            from qkv_tui.ui.edit_prompt import DropEditsScreen

            def answered(go: bool | None) -> None:
                if go and app.ready:
                    self.open(spec, confirmed=True)

            app.push_screen(DropEditsScreen(f"Open {Path(spec).name}?", self.lost(), go="y opens it"), answered)
            return
        try:
            scenario = load_scenario(spec)
            comp = compute(scenario)
        except ScenarioError as exc:
            self.error(f"error: {exc}")
            try:  # watched: the error goes once the file is fixed (or is replaced by what is wrong now)
                failed = resolve(spec)
                self.failed = (failed, _stamp(failed))
            except ScenarioError:
                self.failed = None
            return
        self.timer_stop()
        self.path = file_of(scenario)
        self.stamp = _stamp(self.path) if self.path else None
        self.missing = False
        self.undo_stack.clear()
        self.base, self.dirty, self.announced, self.failed = scenario, [], None, None
        self.changed_from = None
        app.clear_notifications()
        app.install(scenario, comp, Position(0, 0))

    def watch_failed(self) -> None:
        """A file that would not open: when it changes, its error goes (it loads now) or says what is wrong now."""
        if self.failed is None:
            return
        path, stamp = self.failed
        now = _stamp(path)
        if now == stamp:
            return
        self.failed = (path, now)
        try:
            compute(load_scenario(str(path)))
        except ScenarioError as exc:
            self.error(f"error: {exc}")
            return
        self.failed = None
        self.app.clear_notifications()
        self.app.notify(f"{path.name} loads now: ctrl+p opens it (Open file: {path.name}).", timeout=8, markup=False)

    # --- screenshots ----------------------------------------------------------------------------

    def screenshot_name(self) -> str:
        """Named for the scenario, the view and the place in it: ``i_love_ai-op32-score.svg`` in the trace,
        a side view's name from display/side_views.py and its step (``-cache-step03``, ``-cache-chunked-…``,
        ``-tiles-step10``; the heads view's pick, ``-heads-head2``, ``-heads-layer2-head3`` after [ ]),
        ``-map-op32``, ``-help``, ``-notes``; ``-head2`` where there are several heads."""
        from qkv_tui.ui.widgets.heatmap import HeatmapScreen  # the overlays load when first opened, not at start-up
        from qkv_tui.ui.widgets.screens import HelpScreen, NotesScreen

        app = self.app
        stem = self.path.stem if self.path else app.scenario.title
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("_") or "qkv"
        screen, modes, head = app.screen, app.modes, app.position.head
        op_width = len(str(len(app.trace)))
        if isinstance(screen, HelpScreen | NotesScreen):
            return f"{slug}-{'help' if isinstance(screen, HelpScreen) else 'notes'}.svg"
        if isinstance(screen, HeatmapScreen):  # the weights computed up to the current operation
            place, head = f"map-op{app.position.index + 1:0{op_width}d}", screen.head
        elif (side := app.presenter.side(modes)) is not None and not side.per_head:
            return f"{slug}-{side.shot(modes)}.svg"  # the view's step names the head itself (heads-head2)
        elif side is not None:
            steps = len(str(side.steps(app.presenter, modes, head)))
            place = f"{side.shot(modes)}-step{modes.side_step + 1:0{steps}d}"
        else:
            op = app.trace.op(app.position.index)
            stage = app.trace.stage(op.segment.stage).name.lower().replace("_", "")
            place = f"op{app.position.index + 1:0{op_width}d}-{stage}"
        heads = f"-head{head + 1}" if len(app.comp.heads) > 1 else ""
        return f"{slug}-{place}{heads}.svg"

    def unused(self, name: str) -> str:
        """``name``, or with -2, -3 … before .svg where a file of that name exists here or was given already."""
        stem, suffix = name.rsplit(".", 1)
        candidate, number = name, 1
        while candidate in self.shot_names or (Path.cwd() / candidate).exists():
            number += 1
            candidate = f"{stem}-{number}.{suffix}"
        return candidate

    def copy_place(self) -> str:
        from qkv_tui.ui.copy_place import copy_place

        return copy_place(self.app, self.path, self.path is not None and is_builtin(self.path))

    def screenshot(self) -> str:
        """Write the screen as SVG to the current folder (in a browser: a download); returns the file name.

        A name that exists gets -2, -3 …: nothing is overwritten. Toasts are hidden for the picture (an earlier
        one, still showing, is not part of the screen being shown), and the picture is taken once the screen
        has been drawn without them; Textual's "Saved screenshot" toast comes after.
        """
        app = self.app
        name = self.screenshot_name()
        if not app.is_web:  # a browser keeps its own downloads apart
            name = self.unused(name)
        self.shot_names.add(name)
        screen = app.screen
        screen.add_class("-screenshot")  # qkv.tcss: toasts invisible while it is on

        def shoot() -> None:
            try:
                if app.ready:
                    app.deliver_screenshot(filename=name, path=os.getcwd())
            finally:
                screen.remove_class("-screenshot")

        app.call_after_refresh(shoot)
        return name

    # --- autoplay -------------------------------------------------------------------------------

    @property
    def playing(self) -> bool:
        return self.timer is not None

    def autoplay(self) -> None:
        app = self.app
        if app.at_end:
            app.action_first()
        self.timer = app.set_interval(self.speeds[self.speed], self.tick)
        app.notify(f"Autoplay: {1 / self.speeds[self.speed]:g} step/s. > faster, < slower, any other key stops.", timeout=4)
        app.redraw()

    def tick(self) -> None:
        app = self.app
        if not app.ready:
            return
        if app.at_end or app.modes.quiz is not None:
            self.timer_stop()
            return
        app.action_next()

    def timer_stop(self) -> None:
        if self.timer is not None:
            self.timer.stop()
            self.timer = None
            self.app.redraw()

    def intercept(self, event: events.Event) -> bool:
        """While autoplaying, > and < change the speed and any other key stops it; True = the key is used up."""
        if self.timer is None or not isinstance(event, events.Key):
            return False
        if event.key in FASTER + SLOWER:
            faster = event.key in FASTER
            self.speed = min(self.speed + 1, len(self.speeds) - 1) if faster else max(self.speed - 1, 0)
            self.timer.stop()
            self.timer = self.app.set_interval(self.speeds[self.speed], self.tick)
            self.app.redraw()
        else:
            self.timer_stop()
        event.stop()
        event.prevent_default()
        return True

    # --- the command palette -------------------------------------------------------------------------

    def commands(self, screen: Screen[object]) -> Iterator[SystemCommand]:
        app = self.app
        web = app.is_web  # in a browser, saving and screenshots are downloads
        actions = (
            ("Next operation", "→: compute the next cell", app.action_next),
            ("Previous operation", "←: step back one cell", app.action_prev),
            ("Next stage", "]: the first operation of the next stage", app.action_next_stage),
            ("Previous stage", "[: the start of this stage, or of the one before", app.action_prev_stage),
            ("First operation", "home", app.action_first),
            ("Everything computed", "end: the last operation", app.action_last),
            ("Go to operation…", "g: type an operation number", app.action_goto),
            ("Copy this place as a command line", "qkv-tui FILE --stage NAME --op N: opens the app here",
             self.copy_place),
            *((view.title, f"{view.key}: {view.summary}", lambda name=view.name: app.action_side(name))
              for view in SIDE_VIEWS if shown_for(view, app.comp.scenario)),
            ("Predict-then-reveal quiz", "p: type each result before it is shown", app.action_quiz),
            ("What-if scaling table", "w: this row's softmax with and without ÷√dₖ", app.action_whatif),
            ("Hand rounding", "h: round every intermediate to the shown decimals", app.action_hand),
            ("More decimals", "+", lambda: app.action_decimals(1)),
            ("Fewer decimals", "-", lambda: app.action_decimals(-1)),
            ("Edit an input value", "e: change X, a weight, the scale or a mask cell; everything downstream follows",
             self.edit),
            ("Undo the last edit", "u", self.undo),
            ("Save the edits to the file", "ctrl+s: a download of the edited file, comments and layout kept" if web
             else "ctrl+s: keeps its comments and layout; a built-in: a copy here", self.save),
            ("Reload the file", "r: also done by itself when the file changes on disk", self.reload),
            ("Screenshot (a download)" if web else "Screenshot to the current folder",
             "s: an SVG named for the scenario, the view and the place", self.screenshot),
            ("Autoplay", "a: step on a timer; > faster, < slower, any key stops", self.autoplay),
            ("Attention map", "m: the head's weights over the whole sentence", app.action_heatmap),
            ("Notes", "n: what attention weights are and are not", app.action_notes),
            ("Help", "?: every key, and what each stage computes", app.action_help),
        )
        for title, help_text, callback in actions:
            yield SystemCommand(title, help_text, callback)
        for number, key in enumerate(app.trace.stage_keys, start=1):
            jump = stage_key(number)  # the key is 0 for stage 10, and later stages have none
            yield SystemCommand(f"Stage {number}: {app.trace.stage(key).name}",
                                f"{jump}: jump to the stage's first operation" if jump else "jump to the stage's first operation",
                                lambda n=number: app.action_stage(n))
        for h, head in enumerate(app.comp.heads):
            if len(app.comp.heads) > 1:
                yield SystemCommand(f"Head: {head.name}", "view this head (tab cycles)",
                                    lambda h=h: app.move_to(app.stepper.switch_head(app.position, h - app.position.head)))
        for name in builtin_names():
            # by path: a bare name would open a same-named ./NAME.toml instead of the packaged file
            packaged = str(builtin_dir() / f"{name}.toml")
            yield SystemCommand(f"Open built-in scenario: {name}", "the packaged file, from its first operation",
                                lambda p=packaged: self.open(p), discover=False)
        for path in sorted(Path.cwd().glob("*.toml"))[:200]:
            yield SystemCommand(f"Open file: {path.name}", f"{path.parent}", lambda p=str(path): self.open(p), discover=False)
        for name, textual_name in themes.THEMES.items():
            what = "for projectors and bright rooms" if name == "light" else "for screens"
            yield SystemCommand(f"Theme: {name}", f"{what} (Textual's {textual_name})",
                                lambda t=textual_name: setattr(app, "theme", t), discover=False)
