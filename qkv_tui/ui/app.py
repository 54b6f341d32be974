"""The step-through app: one position and one set of modes; every widget is drawn from them."""

from __future__ import annotations

import gc
import io
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, TextIO

from rich.console import RenderableType
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult, SystemCommand
from textual.await_complete import AwaitComplete
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.geometry import Size
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen, Screen
from textual.widgets import Input, Static
from textual.worker import Worker

from qkv_tui.core.engine import Computation, compute
from qkv_tui.core.scenario import Scenario, load_scenario
from qkv_tui.display.layout import fitted, overview_rows, pane_height, share_width
from qkv_tui.display.modes import MAX_DECIMALS, MIN_DECIMALS, TRACE, Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.display.presenting import next_prose, presented, prose_flag
from qkv_tui.display.side_view import is_empty, key_state
from qkv_tui.display.side_views import SIDE_VIEWS, side_view
from qkv_tui.display.text import pictured
from qkv_tui.display.view import STAGE_KEYS, PaneSpec
from qkv_tui.teach.stepper import Position, Stepper
from qkv_tui.teach.trace import Trace
from qkv_tui.ui.live import Live
from qkv_tui.ui.session import Session
from qkv_tui.ui.shared_css import SharedStylesheet
from qkv_tui.ui.train_steps import GROUP as TRAIN_GROUP
from qkv_tui.ui.train_steps import TrainProgress, TrainSteps
from qkv_tui.ui.widgets.matrix import MatrixView
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine, KeyFooter, QuizInput, StageBar
from qkv_tui.ui.widgets.trace_screen import TraceScreen

if TYPE_CHECKING:
    from qkv_tui.teach.quiz import Question
    from qkv_tui.ui.widgets.heads import HeadsPanel

MIN_WIDTH, MIN_HEIGHT = 50, 14
OVERVIEW_ROWS, OVERVIEW_SLOTS = 3, 8  # rows of context panes below the focus panes, as many as fit across
OVERVIEW_MIN_HEIGHT = 6  # a context pane shows at least three rows
FOCUS_MIN_ROWS = 8  # rows a tall focus pane keeps when it shares the screen with context panes
# lines the focus panes keep however long the explanation (which then scrolls): up to 8 rows whole
FOCUS_FLOOR = FOCUS_MIN_ROWS + 3
SIDE_ACTIONS = tuple(f"side('{view.name}')" for view in SIDE_VIEWS)  # each side view's key opens it
# the footer's keys from most to least needed: a narrow terminal drops them from the end, whole
FOOTER_KEEP = ("help", "quit", "next", "reveal", "quiz", "prev", "next_stage", "head", "row", *SIDE_ACTIONS)
FOOTER_ORDER = ("head", "next", "prev", "row", "next_stage", *SIDE_ACTIONS, "reveal", "quiz", "help", "quit")
# under a pending question: which keys act, and why the stage keys do not (they type the answer)
QUIZ_KEYS = "esc reveals · p leaves · digits answer: ] [ change stage"
HEADS_FLOOR = 6  # lines the heads view's maps keep however long the explanation (which then scrolls)


def _collect_again() -> None:
    """gc.enable, as a Python function: Textual reads a callback's signature, and a builtin's costs a regex compile."""
    gc.enable()


class QKVApp(Session):
    """softmax(QKᵀ/√dₖ)V, one operation at a time."""

    # An absolute path: a relative one resolves against the file of whichever subclass is run.
    CSS_PATH = Path(__file__).with_name("qkv.tcss")
    TITLE = "qkv-tui"
    ENABLE_COMMAND_PALETTE = True  # ctrl+p: every action, stages, heads, scenarios, themes (ui/live.py)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("right,space", "next", "next", key_display="→", priority=True),
        Binding("left", "prev", "prev", key_display="←", priority=True),
        Binding("down", "row(1)", "row", key_display="↓", priority=True),
        Binding("up", "row(-1)", "row back", key_display="↑", show=False, priority=True),
        Binding("right_square_bracket", "next_stage", "stage", key_display="]", priority=True),
        Binding("left_square_bracket", "prev_stage", "stage back", key_display="[", show=False, priority=True),
        Binding("home", "first", "first", show=False, priority=True),
        Binding("end", "last", "all", show=False, priority=True),
        Binding("tab", "head(1)", "head", priority=True),
        Binding("shift+tab", "head(-1)", "head", show=False, priority=True),
        # 1 … 9, then 0 for stage 10: the stage bar labels each stage with the key that jumps there
        *(Binding(key, f"stage({number})", f"stage {number}", show=False) for number, key in enumerate(STAGE_KEYS, 1)),
        Binding("g", "goto", "go to", show=False),
        *(Binding(view.key, action, view.label, show=view.in_footer and view.applies is None)  # applies: only for some scenarios
          for view, action in zip(SIDE_VIEWS, SIDE_ACTIONS, strict=True)),
        Binding("c", "option", "prefill/chunks", show=False),  # the side view's own choice: the cache's schedule
        Binding("enter", "side_enter", "step through it", show=False),  # the heads view's pick opens in the trace
        Binding("p", "quiz", "predict"),
        Binding("w", "whatif", "what if", show=False),
        Binding("h", "hand", "by hand", show=False),
        Binding("plus,equals_sign", "decimals(1)", "more decimals", show=False),
        Binding("minus", "decimals(-1)", "fewer decimals", show=False),
        Binding("escape", "reveal", "reveal", show=False),
        Binding("n", "notes", "notes", show=False),
        Binding("f", "prose", "prose", show=False),  # presenting: prose hidden → blank slate → all back
        Binding("m", "heatmap", "map", show=False),
        Binding("e", "edit", "edit", show=False),
        Binding("u", "undo", "undo", show=False),
        Binding("ctrl+s", "save", "save", show=False),
        Binding("r", "reload", "reload", show=False),
        # priority: help, notes and the map are photographed too (check_action leaves s to a focused input)
        Binding("s", "take_screenshot", "screenshot", show=False, priority=True),
        Binding("a", "autoplay", "autoplay", show=False),
        Binding("pagedown", "explain_page(1)", "scroll the explanation", show=False),
        Binding("pageup", "explain_page(-1)", "scroll the explanation back", show=False),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, scenario: Scenario | str | Path = "i_love_ai", computation: Computation | None = None,
                 theme: str | None = None, read_only: bool = False, place: Position | None = None,
                 decimals: int | None = None, presenter: Presenter | None = None) -> None:
        super().__init__()
        self.stylesheet = SharedStylesheet.like(self.stylesheet)  # its CSS parsed once per process (--serve's forks)
        self.scenario = load_scenario(scenario)
        if presenter is not None:  # made in advance, for this computation (edges/serve/prepared.py)
            computation = presenter.comp
        self.comp = computation if computation is not None else compute(self.scenario)
        self.trace = Trace(self.comp) if presenter is None else presenter.exact
        self.stepper = Stepper(self.trace)
        self.presenter = Presenter(self.comp, self.trace) if presenter is None else presenter
        self.theme = "textual-dark"
        self.set_reactive(QKVApp.position, self.stepper.start() if place is None else place)  # --stage --op
        if decimals is not None:  # --decimals
            self.set_reactive(QKVApp.modes, replace(self.modes, decimals=decimals))
        self.ready = False  # widgets exist only after mount, and no longer once the app is exiting
        self.starting = True  # until mount (the footer's keys are made before it: keys_as_mounted)
        self._as_mounted = False
        self._placed: dict[str, int] = {}  # height last given to each row of panes
        self._slots: dict[str, list[MatrixView]] = {}  # each row's pane widgets, found once
        self._rows: dict[str, Horizontal] = {}  # the rows of panes mounted so far, by id
        self._drawn: tuple[object, ...] | None = None  # (position, modes, size) of the last redraw
        self._term: Size | None = None  # the size the latest Resize event announced
        self._ends: tuple[bool, ...] | None = None  # what greys footer keys out, when last refreshed
        self._maps: HeadsPanel | None = None  # the heads view's maps, once shown
        self._quizbar: Vertical | None = None  # the quiz's bar, once the quiz has asked
        self._quiz_lines: tuple[Static, Static, QuizInput]  # its message, its prompt and its answer box, with it
        self.live = Live(self, theme)  # edit, undo, save, reload, screenshots, autoplay, palette, theme
        self.train_steps = TrainSteps(self)  # the Train view's long runs, in a worker thread
        self.live.read_only = read_only  # --read-only: a lecture's numbers, the same for everyone

    @property
    def decimals(self) -> int:
        return self.modes.decimals

    def action_command_palette(self) -> None:
        """Textual's palette, whose page keys wait for its list to be laid out (widgets/palette.py)."""
        from qkv_tui.ui.widgets.palette import Palette  # with its first use, like the other overlays

        if self.use_command_palette and not any(isinstance(s, Palette) for s in self.screen_stack):
            self.push_screen(Palette(id="--command-palette"))

    def get_default_screen(self) -> Screen[None]:
        return TraceScreen(id="_default")  # as Textual's own, less a restyle at the first frame

    def compose(self) -> ComposeResult:
        with Vertical(id="main"):
            yield StageBar(id="stagebar")
            yield FormulaLine(id="formula")
            # The rows of panes are empty, and the context rows absent, until a screen needs them (_fill mounts
            # them), the quiz's bar until the quiz asks (_quiz_bar), the notice until the terminal is too small
            # (_too_small_notice): every widget costs the first frame its styling and every app --serve forks
            # its memory (the ten these were, hidden on I love AI's first screen: 0.45 MiB a student)
            yield Horizontal(id="focus")
            yield ExplainPanel(id="explain")
        yield KeyFooter(FOOTER_KEEP, FOOTER_ORDER)

    @contextmanager
    def keys_as_mounted(self) -> Iterator[None]:
        """check_action answering as it will once the app is mounted: the footer, composed before the mount,
        makes the keys the mount turns on (widgets/panels.py KeyFooter)."""
        self._as_mounted = True
        try:
            yield
        finally:
            self._as_mounted = False

    def on_mount(self) -> None:
        self.title = pictured(self.scenario.title)
        self.ready, self.starting = True, False
        self.live.start()
        self.redraw()
        self.refresh_bindings()  # the keys check_action kept off until now
        if not gc.isenabled():  # --serve's app starter held the collector off for the start (edges/serve/zygote.py)
            self.call_after_refresh(_collect_again)

    def on_resize(self, event: events.Resize) -> None:
        # This handler runs before App's own, which is what updates self.size: trust the event,
        # or the screen is drawn for the size before (no "too small" after a shrink, a stale one after a grow).
        self._term = event.size
        if self._drawn != (self.position, self.modes, event.size):  # the first resize repeats what mount drew
            self.redraw()

    @property
    def term(self) -> Size:
        """The terminal's size, as of the latest resize."""
        return self._term if self._term is not None else self.size

    def watch_position(self) -> None:
        self._changed()

    def watch_modes(self, old: Modes, new: Modes) -> None:
        if old.question is not new.question:  # typed text belongs to the question it was typed for
            self._clear_answer()
        self._changed()

    def _changed(self) -> None:
        self.redraw()
        ends = (self.at_start, self.at_end, self.modes.side, self.modes.asking)
        if ends != self._ends:  # the footer's greyed keys change only here; rebuilding it costs a frame
            self._ends = ends
            self.refresh_bindings()

    # --- drawing ------------------------------------------------------------------

    @property
    def too_small(self) -> bool:
        return self.term.width < MIN_WIDTH or self.term.height < MIN_HEIGHT

    def redraw(self) -> None:
        """Make every widget show the current position and modes."""
        if not self.ready:
            return
        size = self.term
        self._drawn = (self.position, self.modes, size)
        small = self.too_small
        # the trace's own screen, not self.screen: a resize while help, go-to or the map is on top
        # would otherwise mark the modal, and the trace would show the old size's layout once it closed
        main = self.screen_stack[0]
        if main.has_class("-too-small") != small:
            main.set_class(small, "-too-small")
        self.live.fit_footer()  # too small too: "press q to quit" needs the q key in view
        if small:
            self._answer_box()  # a question answered or left while too small gives its keys back too
            self._too_small_notice().update(
                f"terminal too small: need {MIN_WIDTH}×{MIN_HEIGHT}, have {size.width}×{size.height}"
                "\nenlarge the window, or press q to quit"
            )
            return
        screen = self.live.mark(presented(self.presenter.frame(self.position, self.modes), self.modes.prose))
        self.train_steps.follow()  # the Train view asked for steps too many to compute on a key: a worker does
        self.query_one(StageBar).show(self.scenario.title, screen.explanation, size.width)
        self.query_one(FormulaLine).show(screen.explanation, self._flags(), size.width)
        explain = self.query_one(ExplainPanel)
        explain.show(screen.explanation, screen.description, screen.notes, prose=self.modes.prose == "shown")
        quiz_lines = self._show_quiz()
        # the focus panes come first, then the whole explanation, then context panes in what is left
        avail = size.height - 3 - quiz_lines  # stage bar, formula line, footer and the quiz
        explain_lines = explain.lines_needed(size.width)
        explain.expect(size.width)
        if screen.heads is not None:  # the heads view: every head's map in place of the panes
            for group in ("focus", *(f"overview-{i}" for i in range(OVERVIEW_ROWS))):
                self._fill(group, [], 0)
            self._heads_panel().show(screen.heads, size.width, max(avail - explain_lines, HEADS_FLOOR))
            return
        if self._maps is not None:
            self._maps.hide()
        # the whole explanation where the panes can spare it; else the panes keep a few rows and it scrolls
        focus_budget = max(avail - explain_lines, min(pane_height(screen.focus), FOCUS_FLOOR))
        if screen.extra:  # big matrices: half the room, so the rest of the head stays in view below
            focus_budget = min(focus_budget, max(FOCUS_MIN_ROWS + 3, avail // 2))
        room = avail - self._fill("focus", screen.focus, focus_budget) - explain_lines
        rows = overview_rows(screen.extra, size.width, OVERVIEW_SLOTS, OVERVIEW_ROWS, room, OVERVIEW_MIN_HEIGHT)
        for i in range(OVERVIEW_ROWS):
            room -= self._fill(f"overview-{i}", rows[i] if i < len(rows) else [], room)

    def _flags(self) -> str:
        modes = self.modes
        flags = [f"{modes.decimals} dp"]
        if modes.hand:
            flags.append("by hand")
        if modes.whatif:
            flags.append("what-if")
        flags += self.live.flags()
        if modes.prose != "shown":
            flags.append(prose_flag(modes.prose))
        return " · ".join(flags)

    def _too_small_notice(self) -> Static:
        """The notice shown in place of everything while the terminal is too small, mounted when first needed."""
        main = self.screen_stack[0]
        found = main.query("#too-small")
        if found:
            return found.only_one(Static)
        notice = Static("", id="too-small")
        main.mount(notice, after=main.query_one("#main"))
        return notice

    def _quiz_bar(self) -> Vertical | None:
        """The quiz's bar under the explanation, mounted the first time the quiz asks; None until then."""
        if self._quizbar is None and self.modes.asking:
            answer = QuizInput(placeholder="answer", id="quiz-input", disabled=True)
            answer.cursor_blink = False  # a steady cursor: calmer, and snapshots stay stable
            self._quiz_lines = (Static("", id="quiz-message"), Static("", id="quiz-prompt"), answer)
            self._quizbar = Vertical(self._quiz_lines[0], Horizontal(*self._quiz_lines[1:], id="quiz-ask"), id="quizbar")
            self.query_one("#main").mount(self._quizbar)  # last, as it always was: after the explanation
        return self._quizbar

    def _show_quiz(self) -> int:
        """The quiz lines under the explanation; returns how many screen lines they take."""
        bar = self._quiz_bar()
        if bar is None:
            return 0
        modes = self.modes
        bar.display = modes.asking  # the quiz asks in the view it was switched on in
        field = self._answer_box()
        if not bar.display or field is None:
            return 0
        # Text, not markup: answers and token labels are the learner's and the scenario's own words
        message = pictured(modes.message or (QUIZ_KEYS if modes.question is not None else ""))
        self._quiz_lines[0].update(Text.assemble((str(modes.quiz), "bold"), "  ", message))
        prompt = pictured(modes.question.prompt if modes.question is not None
                           else f"Press → for the next {'step' if modes.side else 'operation'} to predict.")
        self._quiz_lines[1].update(Text(prompt))
        if modes.question is not None and not field.has_focus:
            field.focus()
        width = max(self.term.width - 2, 1)
        return -(-len(f"{modes.quiz}  {message}") // width) + -(-len(prompt) // max(width - 18, 1))

    def _answer_box(self) -> QuizInput | None:
        """The answer box, taking keys only while a question is shown (in the quiz's own view, not too small);
        None before the quiz first asked."""
        if self._quizbar is None:
            return None
        field = self._quiz_lines[2]
        shown = not self.too_small and self.modes.asking
        field.question = self.modes.question if shown else None
        field.disabled = field.question is None  # which also lets go of the focus: keys are the app's again
        return field

    def install(self, scenario: Scenario, comp: Computation, position: Position | None = None) -> None:
        """Show another computation (an edit, an undo, a reload, another file); the position is kept where it
        still exists, and so is the side view's step."""
        self.scenario, self.comp = scenario, comp
        self.trace = Trace(comp)
        self.stepper = Stepper(self.trace)
        self.presenter = Presenter(comp, self.trace)
        self.title = scenario.title
        old = self.position if position is None else position
        head = min(old.head, len(comp.heads) - 1)
        moved = self.stepper.goto(Position(old.index, head), old.index)
        modes = self.modes
        self.modes = replace(modes, question=None, message="", side_step=min(modes.side_step, scenario.n - 1))
        if moved != self.position:
            self.position = moved
        self._drawn = None
        self.redraw()
        self.refresh_bindings()

    def _heads_panel(self) -> HeadsPanel:
        """The heads view's maps, made when first shown (the first screen does not pay for them)."""
        if self._maps is None:
            from qkv_tui.ui.widgets.heads import HeadsPanel

            self._maps = HeadsPanel(id="heads-maps")
            self.query_one("#main").mount(self._maps, before=self.query_one(ExplainPanel))
        return self._maps

    def _row(self, group: str, wanted: bool) -> Horizontal | None:
        """A row of pane slots: the focus row, or a context row mounted the first time it has panes (in its
        place, after the rows above it); None for a context row not yet wanted."""
        box = self._rows.get(group)
        if box is None:
            found = self.query(f"#{group}")
            if found:
                box = self._rows[group] = found.only_one(Horizontal)
            elif wanted:
                box = self._rows[group] = Horizontal(id=group, classes="overview")
                above = max((name for name in self._rows if name < group), default="focus")  # "focus" < "overview-"
                self.query_one("#main").mount(box, after=self._rows.get(above) or self.query_one("#focus"))
        return box

    def _fill(self, group: str, specs: list[PaneSpec], height: int) -> int:
        """Show ``specs`` in a row of pane slots at most ``height`` lines tall; returns the lines used."""
        box = self._row(group, bool(specs))
        if box is None:
            return 0
        used = min(height, pane_height(specs))
        # every style change costs a layout pass: touch only what differs from the last frame
        if self._placed.get(group) != used:
            self._placed[group] = used
            box.styles.height = used
            box.display = used > 0
        if group == "focus":
            specs = fitted(specs, self.term.width, used)
        widths = share_width(specs, self.term.width, used)
        if group not in self._slots:
            self._slots[group] = list(box.query(MatrixView))
        slots = self._slots[group]
        if len(specs) > len(slots):  # a row's slots are made when first needed, and then kept
            more = [MatrixView(id=f"{group}-{i}") for i in range(len(slots), len(specs))]
            box.mount_all(more)
            slots.extend(more)
        for i, view in enumerate(slots):
            view.place(widths[i] if i < len(specs) else None)
            if i < len(specs):
                view.show(specs[i])
        return used

    # --- actions --------------------------------------------------------------------

    @property
    def at_start(self) -> bool:
        return (self.modes.side_step if self.modes.side else self.position.index) == 0

    @property
    def at_end(self) -> bool:
        if self.modes.side:
            return self.modes.side_step >= self._side_last()
        return self.position.index == self.stepper.last_index

    def exit(self, result: None = None, return_code: int = 0, message: RenderableType | None = None) -> None:
        # From here on the widgets are being taken down: a key of the same burst (q then e, a paste)
        # must not open a prompt or redraw a pane that no longer exists (check_action and redraw ask)
        self.ready = False
        if self.train_steps.worker is not None:
            self.train_steps.worker.cancel()  # its thread ends after the step it is on
        super().exit(result, return_code, message)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self.ready and not self._as_mounted:
            return action == "quit"  # before mount, or once quitting: nothing to act on, and quit always works
        if isinstance(self.screen, ModalScreen) and action in self._own_actions():
            # help, notes and go-to sit on top of the trace: its keys must not move it unseen
            # (False, not None: the key then goes on to the modal's own widgets, such as its input);
            # s photographs help, notes and the map too, but is a letter where a prompt has the focus
            return action == "take_screenshot" and not isinstance(self.focused, Input)
        if action == "take_screenshot" and isinstance(self.focused, Input):
            return False  # the quiz's answer box: s is typed
        if action == "side" and self._option() is not None and parameters and \
                getattr(side_view(str(parameters[0])), "key", "") == "c":
            return False  # the open view's own c (the cache's schedules) comes first; the cost view's c waits
        if (side := self.presenter.side(self.modes)) is not None:
            empty = is_empty(side, self.presenter)
            state = key_state(side, action, parameters, lambda a, p: self._side_act(a, p) is not None, empty=empty)
            if state is not True:  # None: greyed at an end of the view; False: no effect there, not in its footer
                return state
            if empty and action == "side" and parameters and (other := side_view(str(parameters[0]))) is not None \
                    and other is not side and is_empty(other, self.presenter):
                return False  # from one view with nothing to show to another: only its own key, to leave, is offered
        stages = () if self.modes.side else ("prev_stage", "next_stage")  # a side view's [ ] are its own (below)
        if action in ("prev", "first", *stages[:1]) and self.at_start:
            return None
        if action in ("next", "last", *stages[1:]) and self.at_end:
            return None
        if action == "row" and (self.at_start if parameters == (-1,) else self.at_end):
            return None
        if action == "head" and self.stepper.head_count == 1:
            return False  # one head: tab never acts here, so the footer does not offer it
        if action == "head" and "qkv_tui.ui.widgets.heatmap" in sys.modules:  # else no map was ever opened
            from qkv_tui.ui.widgets.heatmap import HeatmapScreen

            if isinstance(self.screen, HeatmapScreen):
                return False  # tab walks the map's heads, not the trace's behind it
        if action == "side_enter" and getattr(self.presenter.side(self.modes), "enter", None) is None:
            return None
        if action == "option" and self._option() is None:
            return None
        return True

    @classmethod
    def _own_actions(cls) -> frozenset[str]:
        """The actions of this app's key bindings, without their arguments; quit stays always on."""
        return frozenset(b.action.partition("(")[0] for b in cls.BINDINGS if isinstance(b, Binding)) - {"quit"}

    def move_to(self, position: Position) -> None:
        """Go somewhere in the trace; a pending quiz question is left unanswered (revealed, not scored)."""
        self.modes = self._left(self.modes)
        self.position = position

    @staticmethod
    def _left(modes: Modes) -> Modes:
        """Modes without the pending question, saying it was left (moving away, another view, p)."""
        pending = modes.question
        if pending is None:
            return modes
        what = pending.target or "the question"
        if what.startswith("the "):  # a sentence's first word; a symbol (m̃, Q) keeps its case
            what = "The" + what[3:]
        return replace(modes, question=None, message=f"{what} left unanswered, not scored.")

    def _clear_answer(self) -> None:
        """Empty the answer box: what was typed for a skipped question must not answer the next one."""
        if self.ready and self._quizbar is not None:
            self._quiz_lines[2].value = ""

    def _questions(self, index: int) -> list[Question]:
        """The questions for an operation, about the numbers on screen (hand-rounded ones when h is on)."""
        from qkv_tui.teach.quiz import questions  # loaded when the quiz first asks, not with the first screen

        return questions(self.presenter.view(self.modes).trace, index, self.decimals)

    def _asked_again(self, modes: Modes) -> Modes:
        """New numbers on screen (hand rounding, decimals): a pending question asks about them, not the old ones."""
        pending = modes.question
        if pending is None:
            return modes
        if pending.side:  # a side view's line, written at the new decimals
            again_side = self.presenter.side_question(modes, self.position.head)
            return replace(modes, question=again_side, message="")
        from qkv_tui.teach.quiz import questions

        asked = questions(self.presenter.view(modes).trace, pending.index, modes.decimals)
        again = [q for q in asked if q.kind == pending.kind]
        return replace(modes, question=again[0] if again else None, message="")

    def _side_step(self, step: int) -> None:
        self.modes = replace(self._left(self.modes), side_step=min(max(step, 0), self._side_last()))

    def _side_last(self) -> int:
        """The last step of the side view in force (the cache's steps, or FlashAttention's operations)."""
        return self.presenter.side_steps(self.modes, self.position.head) - 1

    def action_next(self) -> None:
        if self.modes.side and self.modes.asking:  # the side view's quiz: its next step asks first
            modes = self._left(self.modes)
            modes = replace(modes, side_step=min(modes.side_step + 1, self._side_last()))
            asked_side = self.presenter.side_question(modes, self.position.head)
            self.modes = replace(modes, question=asked_side, message=self._moved_on(modes, asked_side))
        elif self.modes.side:
            self._side_step(self.modes.side_step + 1)
        elif self.modes.asking:
            # every step forward asks first; an unanswered question is left (revealed, not scored)
            modes = self._left(self.modes)
            self.position = self.stepper.next(self.position)
            asked = self._questions(self.position.index)
            self.modes = replace(modes, question=asked[0] if asked else None,
                                 message=self._moved_on(modes, asked[0] if asked else None))
        else:
            self.position = self.stepper.next(self.position)

    def action_prev(self) -> None:
        if self.modes.side:
            self._side_step(self.modes.side_step - 1)
        else:
            self.move_to(self.stepper.prev(self.position))

    def _side_act(self, action: str, parameters: tuple[object, ...]) -> Modes | None:
        """The open side view's own meaning for a trace key (display/side_view.py act), or None."""
        side = self.presenter.side(self.modes)
        if side is None or side.act is None:
            return None
        name = f"row{parameters[0]:+d}" if action == "row" and parameters else action
        return side.act(self.presenter, self.modes, name, self._maps.across if self._maps is not None else 1)

    @on(TrainProgress)
    def _train_progress(self) -> None:
        self.redraw()  # the worker has more steps in hand: the screen shows the last, and how far it has come

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == TRAIN_GROUP and event.worker.is_finished:
            self.redraw()  # a run's worker ended: the view shows its step, or the next worker starts

    def action_side_enter(self) -> None:
        """Enter in a side view that opens a head (the heads view): that head's first stage in the trace."""
        side = self.presenter.side(self.modes)
        if side is None or side.enter is None:
            return
        comp, head = side.enter(self.presenter, self.modes)
        self.modes = replace(self.modes, view=TRACE, side_step=0, heads_layer=None, question=None, message="")
        if comp is not None:
            self.install(comp.scenario, comp)
        run = next(r for r in self.trace.runs if r.head == head)  # its first stage of its own (Project)
        self.move_to(self.stepper.goto(Position(run.start, head), run.start))

    def action_row(self, by: int) -> None:
        """A whole row of the matrix being filled at once: ↓ finishes it (or does the next), ↑ undoes one."""
        if self.modes.side:
            acted = self._side_act("row", (by,))
            if acted is not None:
                self.modes = acted
            return
        self.move_to(self.stepper.next_row(self.position) if by > 0 else self.stepper.prev_row(self.position))

    def action_next_stage(self) -> None:
        if (acted := self._side_act("next_stage", ())) is not None:  # the heads view: the next layer
            self.modes = acted
            return
        self.move_to(self.stepper.next_stage(self.position))

    def action_prev_stage(self) -> None:
        if (acted := self._side_act("prev_stage", ())) is not None:
            self.modes = acted
            return
        self.move_to(self.stepper.prev_stage(self.position))

    def action_first(self) -> None:
        if self.modes.side:
            self._side_step(0)
        else:
            self.move_to(self.stepper.first(self.position))

    def action_last(self) -> None:
        if self.modes.side:
            self._side_step(self._side_last())
        else:
            self.move_to(self.stepper.last(self.position))

    def action_head(self, by: int) -> None:
        if self.modes.side:
            self.modes = self._left(self.modes)
            self.position = Position(self.position.index, (self.position.head + by) % self.stepper.head_count)
        else:
            self.move_to(self.stepper.switch_head(self.position, by))

    def action_stage(self, number: int) -> None:
        self.move_to(self.stepper.stage(self.position, number))

    def action_side(self, name: str) -> None:
        """Open a side view (display/side_views.py) from its first step; its own key again returns to the trace."""
        view = TRACE if self.modes.view == name else name
        left = self._left(self.modes)
        opened = side_view(view)
        step = 0 if opened is None or opened.opening is None else opened.opening(self.presenter, left, self.position.head)
        self.modes = replace(left, view=view, side_step=step, message=left.message if self.modes.question else "")

    def _option(self) -> Callable[[Modes], Modes] | None:
        side = self.presenter.side(self.modes)
        # a view with nothing to show here has no option to cycle: c is the cost view's
        return side.option if side is not None and not is_empty(side, self.presenter) else None

    def action_option(self) -> None:
        """The open side view's own choice (c): in the cache view, prefill at once → chunked prefill → token by token."""
        option = self._option()
        if option is not None:
            self.modes = option(self._left(self.modes))

    def action_quiz(self) -> None:
        """Predict-then-reveal: each step asks for the result before showing it. In the trace, the tiles and
        the cache view alike; p in another view than the quiz's brings the quiz (and its score) there."""
        modes = self.modes
        on = not modes.asking
        if on:
            from qkv_tui.teach.quiz import Score  # the quiz's module loads here, not with the first screen

            here = "" if not modes.side else f" in the {modes.view} view"
            self.modes = replace(modes, quiz=modes.quiz or Score(), quiz_view=modes.view, question=None,
                                 message=f"Predict-then-reveal is on{here}: press → and type what the next result will be.")
            return
        if modes.question is not None:  # the quiz bar goes with it: the toast says what became of the question
            what = modes.question.target or "the question"
            self.notify(f"Predict-then-reveal is off: {what} left unanswered, not scored ({modes.quiz}).",
                        timeout=4, markup=False)
        self.modes = replace(modes, quiz=None, quiz_view=TRACE, question=None, message="")
        self.set_focus(None)

    @staticmethod
    def _moved_on(before: Modes, asked: Question | None) -> str:
        """The quiz's line after a step forward: a question left behind is said, beside the keys that act."""
        if not before.message.endswith("left unanswered, not scored.") or asked is None:
            return "" if asked is not None else before.message
        return f"{before.message} {QUIZ_KEYS}"

    def action_prose(self) -> None:
        """f: the prose put away (the matrices get its room), then all but the stage bar, then all back."""
        self.modes = replace(self.modes, prose=next_prose(self.modes.prose))

    def action_reveal(self) -> None:
        """Escape: a toast on screen goes first (a click on one closes it too); then the answer to the
        pending question is shown (unscored); with none pending, the quiz is left. Before all that, a
        Train view run being computed stops at the step it reached."""
        stopped = self.train_steps.stop()
        if stopped is not None:
            self.modes = replace(self.modes, side_step=stopped)
            return
        if self.live.toasts():
            self.clear_notifications()
            return
        if self.modes.question is not None:
            self.modes = replace(self.modes, question=None, message="Revealed, not scored.")
            self.set_focus(None)
        elif (side := self.presenter.side(self.modes)) is not None and (side.enter is not None or
                                                                       is_empty(side, self.presenter)):
            # the heads view, and a view with nothing to show here (its one line): back to the trace
            self.modes = replace(self.modes, view=TRACE, side_step=0)
        elif self.modes.asking:
            self.action_quiz()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        question = self.modes.question
        if question is None:
            return
        verdict = question.check(event.value)
        event.input.value = ""
        if verdict.right is None:  # not an answer: say so kindly and ask again
            self.modes = replace(self.modes, message=verdict.message)
            return
        # after "which key wins this row?" comes the cell's own value (a side view asks one question a step)
        later = [] if question.side else [q for q in self._questions(question.index) if question.kind == "argmax" != q.kind]
        from qkv_tui.teach.quiz import Score  # loaded already: a question was asked

        self.modes = replace(self.modes, quiz=(self.modes.quiz or Score()).add(verdict),
                             question=later[0] if later else None, message=verdict.message)
        if not later:
            self.set_focus(None)

    def action_whatif(self) -> None:
        self.modes = replace(self.modes, whatif=not self.modes.whatif)

    def action_hand(self) -> None:
        self.modes = self._asked_again(replace(self.modes, hand=not self.modes.hand))

    def action_decimals(self, by: int) -> None:
        decimals = min(max(self.modes.decimals + by, MIN_DECIMALS), MAX_DECIMALS)
        self.modes = self._asked_again(replace(self.modes, decimals=decimals))

    def action_explain_page(self, by: int) -> None:
        """Page through an explanation longer than its room (a 10-token softmax, the what-if table)."""
        panel = self.query_one(ExplainPanel)
        if by > 0:
            panel.scroll_page_down(animate=False)
        else:
            panel.scroll_page_up(animate=False)

    def action_help(self) -> None:
        from qkv_tui.ui.widgets.screens import HelpScreen  # the overlays load when first opened, not at start-up

        self.push_screen(HelpScreen([self.trace.stage(key) for key in self.trace.stage_keys], self.comp.scenario))

    def action_notes(self) -> None:
        from qkv_tui.ui.widgets.screens import NotesScreen

        self.push_screen(NotesScreen())

    def action_heatmap(self) -> None:
        from qkv_tui.ui.widgets.heatmap import HeatmapScreen

        pending = self.modes.question is not None  # a cell the learner is predicting stays hidden here too
        trace = self.presenter.view(self.modes).trace  # by hand: the weights the panes show, not the exact ones
        self.push_screen(HeatmapScreen(trace, self.position.head, self.position.index - pending))

    def action_goto(self) -> None:
        from qkv_tui.ui.widgets.screens import GotoScreen

        def done(number: int | None) -> None:
            if number is not None:
                self.move_to(self.stepper.goto(self.position, number - 1))

        self.push_screen(GotoScreen(len(self.trace)), done)

    def pop_screen(self) -> AwaitComplete:
        # Textual's command palette can dismiss itself twice (enter picks a command, escape arrives
        # before the pick does): the second would pop the trace's own screen, which Textual refuses by raising
        if len(self.screen_stack) <= 1:
            return AwaitComplete()  # awaiting nothing: done at once
        return super().pop_screen()

    # --- live: edit, reload, palette, screenshots, autoplay (ui/live.py) --------------------

    def _watch_app_focus(self, focus: bool) -> None:
        # Textual's watcher restyles the screen first: a pass the stylesheet skips if no rule can see it
        if isinstance(self.stylesheet, SharedStylesheet):
            self.stylesheet.app_focus_pass = True
        try:
            super()._watch_app_focus(focus)
        finally:
            if isinstance(self.stylesheet, SharedStylesheet):
                self.stylesheet.app_focus_pass = False

    async def on_event(self, event: events.Event) -> None:
        if self.live.intercept(event):  # while autoplaying, a key changes the speed or stops it
            return
        await super().on_event(event)

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)  # Textual's own: theme, keys, screenshot, quit
        yield from self.live.commands(screen)

    def action_edit(self) -> None:
        self.live.edit()

    def action_undo(self) -> None:
        self.live.undo()

    def action_save(self) -> None:
        self.live.save()

    def action_reload(self) -> None:
        self.live.reload()

    def action_take_screenshot(self) -> None:  # not action_screenshot: Textual's own takes a file name
        self.live.screenshot()

    def export_screenshot(self, *, title: str | None = None, simplify: bool = False) -> str:
        """Every SVG of the screen (s, the palette's, the test snapshots) with its blanks where the screen has them."""
        from qkv_tui.ui.screenshot import keeping_blanks

        return keeping_blanks(super().export_screenshot(title=title, simplify=simplify))

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Every toast as plain text: they hold the scenario's and the learner's words, a place (Q[I,0]) or
        a table's name ([backward]), which Textual's markup would read as styles and drop."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """A screenshot (s, and the palette's) as Textual delivers one, but in a browser a download, as ctrl+s's
        file is: Textual opens it in a new tab (open_method "browser", served inline)."""
        from textual._files import generate_datetime_filename

        name = filename or generate_datetime_filename(self.title, ".svg", time_format)
        return self.deliver_text(io.StringIO(self.export_screenshot()), save_directory=path, save_filename=name,
                                 open_method="download", mime_type="image/svg+xml", name="screenshot")

    def deliver_text(self, path_or_file: str | Path | TextIO, *, save_directory: str | Path | None = None,
                     save_filename: str | None = None, open_method: Literal["browser", "download"] = "download",
                     encoding: str | None = None, mime_type: str | None = None, name: str | None = None) -> str | None:
        """Every SVG screenshot (s, and Textual's own in the palette) without fonts fetched from the web."""
        from qkv_tui.ui.screenshot import without_web_fonts

        if mime_type == "image/svg+xml" and not isinstance(path_or_file, str | Path):
            path_or_file = io.StringIO(without_web_fonts(path_or_file.read()))
        return super().deliver_text(path_or_file, save_directory=save_directory, save_filename=save_filename,
                                    open_method=open_method, encoding=encoding, mime_type=mime_type, name=name)

    def action_autoplay(self) -> None:
        self.live.autoplay()


# Everything the app's imports made (Textual's, the command line's, the views') lives as long as the process, like
# what the package froze (qkv_tui/__init__.py): frozen too, the collector's passes before the first frame, and its
# last at exit, skip it
gc.freeze()
