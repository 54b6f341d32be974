"""Modal screens: help (keys and stages), the seed page's notes, and go-to-operation."""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Input, Static

from qkv_tui.core import part_questions as ask
from qkv_tui.core.scenario import Scenario
from qkv_tui.display.side_views import SIDE_VIEWS, shown_for
from qkv_tui.display.text import pictured
from qkv_tui.display.view import STAGE_KEYS, stage_key
from qkv_tui.teach.trace import Stage
from qkv_tui.teach.trace_variants import VARIANT_NOTES
from qkv_tui.ui.widgets.modal import Modal

STAGE_KEYS_ROW = "1 … 9, 0"  # the stage keys' row of KEYS; HelpScreen adds which of them the scenario uses


def stage_keys_row(stages: int) -> tuple[str, str]:
    """The help's row for the stage keys, saying which of them this scenario's ``stages`` stages use."""
    what = "jump to stage N of the head in view (0 is stage 10); the stage bar shows each stage's key"
    if 1 <= stages <= 9:
        what += f"; here 1 … {stages}" if stages > 1 else "; here 1"
    elif stages == len(STAGE_KEYS):
        what += "; here all ten"
    elif stages > len(STAGE_KEYS):
        many = stages > len(STAGE_KEYS) + 1
        later = f"stages 11 … {stages} have" if many else "stage 11 has"
        what += f"; {later} no key (] / [ reach {'them' if many else 'it'})"
    return STAGE_KEYS_ROW, what


KEYS = (
    ("→ / space", "next operation (one cell of one matrix)"),
    ("←", "previous operation"),
    ("↓ / ↑", "next / previous row: ↓ finishes the row being filled, or fills the next one whole; ↑ takes one back"),
    ("] / [", "next / previous stage (a whole matrix)"),
    ("home / end", "first operation / everything computed"),
    stage_keys_row(0),
    ("g", "go to operation N"),
    ("page down / up", "scroll the explanation when it is longer than its room"),
    ("tab / shift+tab", "next / previous head"),
    *(row for view in SIDE_VIEWS for row in view.help),  # k (and c), t, l: display/side_views.py
    ("p", "predict-then-reveal: type each result before it is shown (in the trace, the tiles or the cache view);"
          " escape reveals a pending answer, escape or p leaves; moving away leaves a question unscored, and says so;"
          " while a question waits, digits type the answer (] [ change stage)"),
    ("f", "presenting: hide the prose (the matrices get its room) → a blank slate but the stage bar → all back"),
    ("escape", "close the toasts on screen (a click closes one too); then reveal, as above; in the heads view or a"
               " view with nothing to show here (one line saying why), back to the trace"),
    ("w", "what if: this row's softmax with and without ÷√dₖ, at dₖ ×1, ×4, ×16"),
    ("h", "by hand: round every intermediate to the shown decimals, as on paper"),
    ("+ / -", "more / fewer decimals (default 3, as the seed page)"),
    ("n", "notes: what attention weights are and are not"),
    ("m", "map: the head's weights over the whole sentence; tab walks the heads"),
    ("e", "edit an input value (X, a weight, W_O, the scale, a mask cell); ↑/↓ pick another; all downstream follows"),
    ("u", "undo the last edit (as many times as there were edits)"),
    ("ctrl+s", "save the edits to the scenario file, keeping its comments (a built-in: a copy here)"),
    ("r", "reload the file (also by itself when it changes on disk)"),
    ("s", "screenshot: an SVG in the current folder (in a browser: a download)"),
    ("a", "autoplay: step on a timer; > faster, < slower, any other key stops"),
    ("ctrl+p", "command palette: every action, stages, heads, scenarios, themes"),
    ("?", "this help"),
    ("q", "quit"),
)

NOTES = (
    ("Attention weights are not the model's thoughts",
     "They are a useful diagnostic, not a full explanation of why a model said something. Treat them as one lens,"
     " not a mind-read."),
    ("Q is not stored in the KV cache",
     "Only the Keys and Values of past tokens are reused across decode steps. Each new token brings a fresh Query."
     " A causal mask is what makes this safe: past rows never change when a token is appended."),
    ("Self-attention vs cross-attention",
     "In self-attention Q, K and V all come from the same sequence. In encoder-decoder models the Queries come from"
     " the decoder and the Keys and Values from the encoder's output (cross-attention, Vaswani et al. §3.2.3): in an"
     " English-to-French translator the French being written asks and the English sentence answers. Same formula,"
     " different sources."),
    ("These numbers are pedagogical",
     "Real embeddings and weights are floats learned from data, with hundreds of dimensions and many heads"
     " (32 heads of dₖ = 128 for d_model = 4096). The shapes and the six steps stay the same."),
    *VARIANT_NOTES,  # what modern models change, in plain words
)


class PageScreen(Modal[None]):
    """A page of text over the trace: its own key (? or n), escape or q closes it; ↑ ↓ scroll it."""

    CLOSE_HINT: ClassVar[str] = "esc or q closes"  # the border's subtitle and the page's first line say it too

    def action_dismiss_screen(self) -> None:
        self.dismiss()

    def body(self) -> RenderableType:
        raise NotImplementedError

    def compose(self) -> ComposeResult:
        with VerticalScroll() as page:
            page.border_subtitle = f"{self.CLOSE_HINT} · ↑ ↓ scroll"
            yield Static(self.body())


class HelpScreen(PageScreen):
    """Every key, and what each stage computes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss_screen", "close", key_display="esc/q"),  # the footer: what q does here
        Binding("q,question_mark", "dismiss_screen", "close", show=False),
    ]
    CLOSE_HINT = "esc, q or ? closes"

    def __init__(self, stages: list[Stage], scenario: Scenario | None = None) -> None:
        super().__init__()
        self.stages = stages  # as the scenario names them (Embed is "Input" for a model's residual stream)
        # the rows of side views this scenario has nothing for (the Train view without [backward]) are left out
        # the stages of a scenario with a state in place of the softmax compute none: its help must not head them with one
        self.state = scenario is not None and ask.scenario_has(scenario, "state")
        self.hidden = {row for view in SIDE_VIEWS if scenario is not None and not shown_for(view, scenario)
                       for row in view.help}

    def body(self) -> RenderableType:
        keys = Table.grid()
        keys.add_column(width=19, no_wrap=True, style="bold #ffd75f")  # "  tab / shift+tab" and a gap
        keys.add_column(ratio=1)  # wraps under itself: a hanging indent
        for key, what in KEYS:
            if (key, what) in self.hidden:
                continue
            if key == STAGE_KEYS_ROW:  # which of the stage keys this scenario uses
                key, what = stage_keys_row(len(self.stages))
            keys.add_row(Text(f"  {key}"), Text(what))  # Text, not markup: "[backward]" is a table's name
        parts: list[RenderableType] = [Text(f"{self.CLOSE_HINT} this help; ↑ ↓ and page down / up scroll it.\n",
                                            style="italic #8a8a8a"),
                                       Text("Keys", style="bold underline"), keys,
                                       Text("\nStages: " + ("the state's rule, no softmax" if self.state else "softmax(QKᵀ/√dₖ)V")
                                            + ", one operation at a time", style="bold underline")]
        for number, stage in enumerate(self.stages, start=1):
            jump = stage_key(number)
            label = f"  {jump} {stage.name}" if jump else f"  {stage.name} (stage {number}: no key of its own; ] reaches it)"
            parts += [Text(label, style="bold #5fafff"), _indented(stage.meaning, 4)]
        parts.append(Text("\nModern attention: what the [norm], [rope], [alibi] ... keys do", style="bold underline"))
        for title, body in VARIANT_NOTES:
            parts += [Text(f"  {title}", style="bold #5fafff"), _indented(body, 4)]
        legend = Table.grid()
        legend.add_column(width=9, no_wrap=True)  # "  yellow " and a gap; the meaning wraps under itself
        legend.add_column(ratio=1)
        for word, style, meaning in (
            ("yellow", "bold #000000 on #ffd75f", "the cell being computed"),
            ("blue", "#ffffff on #1f4e79", "the cells it reads"),
            ("green", "bold #5fd75f", "the row maximum of the scores"),
            ("−∞", "#6c6c6c", "a masked cell (weight exactly 0)"),
            ("blank", "", "a cell not computed yet; weights are shaded by size"),
        ):
            legend.add_row(Text.assemble("  ", (word, style)), Text(meaning))
        parts += [Text("\nOn screen", style="bold underline"), legend,
                  Text(f"\n{self.CLOSE_HINT} this help.", style="italic #8a8a8a")]
        return Group(*parts)


def _indented(text: str, indent: int, style: str = "") -> Padding:
    """A paragraph whose every line, wrapped ones too, starts ``indent`` columns in."""
    return Padding(Text(text, style=style), (0, 0, 0, indent))


class NotesScreen(PageScreen):
    """The seed page's caveats."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss_screen", "close", key_display="esc/q"),
        Binding("q,n", "dismiss_screen", "close", show=False),
    ]
    CLOSE_HINT = "esc, q or n closes"

    def body(self) -> RenderableType:
        notes = Table.grid()
        notes.add_column(width=2, no_wrap=True)
        notes.add_column(ratio=1)  # the bullet hangs: wrapped lines line up after "• "
        for title, body in NOTES:
            notes.add_row("•", Text(title, style="bold #ffd75f"))
            notes.add_row("", Text(body + "\n"))  # Text, not markup: a note names tables ([rope])
        return Group(Text("Notes from the page", style="bold underline"),
                     Text(f"{self.CLOSE_HINT} these notes.\n", style="italic #8a8a8a"), notes)


def parse_operation(text: str, total: int) -> int | None:
    """An operation number from 1 to ``total``, or None.

    Parse, then catch: ``str.isdigit`` accepts ``²`` and ``①``, which ``int`` refuses, and
    ``int`` refuses digit strings longer than Python's conversion limit.
    """
    try:
        number = int(text)
    except ValueError:
        return None
    return number if 1 <= number <= total else None


class GotoScreen(Modal[int | None]):
    """Ask for an operation number; answers kindly when the input is not one."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel", key_display="esc")]

    def __init__(self, total: int) -> None:
        super().__init__()
        self.total = total

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Go to operation (1-{self.total}), then enter; esc cancels:")
            yield Input(placeholder=f"1-{self.total}", id="goto-input")
            yield Static("", id="goto-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        value = event.value.strip()
        number = parse_operation(value, self.total)
        if number is None:
            shown = pictured(value if len(value) <= 20 else value[:19] + "…")
            self.query_one("#goto-error", Static).update(  # Text: what was typed is not markup
                Text(f"{shown!r} is not an operation number; type a whole number from 1 to {self.total}.")
            )
            return
        self.dismiss(number)

    def action_cancel(self) -> None:
        self.dismiss(None)
