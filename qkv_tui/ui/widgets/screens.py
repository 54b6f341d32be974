"""Modal screens: help (keys and stages), the seed page's notes, and go-to-operation."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from qkv_tui.screen.text import printable
from qkv_tui.teach.trace import STAGES
from qkv_tui.teach.trace_modern import VARIANT_NOTES

KEYS = (
    ("→ / space", "next operation (one cell of one matrix)"),
    ("←", "previous operation"),
    ("] / [", "next / previous stage (a whole matrix)"),
    ("home / end", "first operation / everything computed"),
    ("1 … 8", "jump to stage N of the head in view"),
    ("g", "go to operation N"),
    ("tab / shift+tab", "next / previous head"),
    ("k", "KV cache: prefill, then decode a token at a time over a paged cache (→ ← step; k again leaves)"),
    ("c", "in the cache view: prefill at once → chunked prefill → token by token"),
    ("t", "tiles: FlashAttention's online softmax, one tile of keys at a time (→ ← step; t again leaves)"),
    ("p", "predict-then-reveal: type each result before it is shown; escape reveals, p or escape leaves"),
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
     " one side and the Keys and Values from the other (cross-attention): same formula, different sources."),
    ("These numbers are pedagogical",
     "Real embeddings and weights are floats learned from data, with hundreds of dimensions and many heads"
     " (32 heads of dₖ = 128 for d_model = 4096). The shapes and the six steps stay the same."),
    *VARIANT_NOTES,  # what modern models change, in plain words
)


class _Modal(ModalScreen[None]):
    DEFAULT_CSS = """
    _Modal { align: center middle; }
    _Modal > VerticalScroll {
        width: 90%; max-width: 100; height: 90%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark,n", "dismiss_screen", "close")]

    def action_dismiss_screen(self) -> None:
        self.dismiss()

    def body(self) -> Text:
        raise NotImplementedError

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.body())


class HelpScreen(_Modal):
    """Every key, and what each stage computes."""

    def __init__(self, stage_keys: list[str]) -> None:
        super().__init__()
        self.stage_keys = stage_keys

    def body(self) -> Text:
        text = Text()
        text.append("Keys\n", style="bold underline")
        for key, what in KEYS:
            text.append(f"  {key:<16}", style="bold #ffd75f")
            text.append(f"{what}\n")
        text.append("\nStages: softmax(QKᵀ/√dₖ)V, one operation at a time\n", style="bold underline")
        for number, key in enumerate(self.stage_keys, start=1):
            stage = STAGES[key]
            text.append(f"  {number} {stage.name}\n", style="bold #5fafff")
            text.append(f"    {stage.meaning}\n")
        text.append("\nModern attention: what the [norm], [rope], [alibi] ... keys do\n", style="bold underline")
        for title, body in VARIANT_NOTES:
            text.append(f"  {title}\n", style="bold #5fafff")
            text.append(f"    {body}\n")
        text.append("\nOn screen\n", style="bold underline")
        text.append("  yellow", style="bold #000000 on #ffd75f")
        text.append(" the cell being computed    ")
        text.append("blue", style="#ffffff on #1f4e79")
        text.append(" the cells it reads\n")
        text.append("  green", style="bold #5fd75f")
        text.append(" the row maximum of the scores    ")
        text.append("−∞", style="#6c6c6c")
        text.append(" a masked cell (weight exactly 0)\n")
        text.append("  blank cells are not computed yet; weights are shaded by size\n")
        text.append("\nesc, q or ? closes this help.", style="italic #8a8a8a")
        return text


class NotesScreen(_Modal):
    """The seed page's caveats."""

    def body(self) -> Text:
        text = Text()
        text.append("Notes from the page\n\n", style="bold underline")
        for title, body in NOTES:
            text.append(f"• {title}\n", style="bold #ffd75f")
            text.append(f"  {body}\n\n")
        text.append("esc, q or n closes these notes.", style="italic #8a8a8a")
        return text


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


class GotoScreen(ModalScreen[int | None]):
    """Ask for an operation number; answers kindly when the input is not one."""

    DEFAULT_CSS = """
    GotoScreen { align: center middle; }
    GotoScreen > Vertical {
        width: 50; height: auto; border: round $accent; background: $surface; padding: 0 1;
    }
    GotoScreen #goto-error { color: $warning; height: auto; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, total: int) -> None:
        super().__init__()
        self.total = total

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Go to operation (1-{self.total}), then enter:")
            yield Input(placeholder=f"1-{self.total}", id="goto-input")
            yield Static("", id="goto-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        value = event.value.strip()
        number = parse_operation(value, self.total)
        if number is None:
            shown = printable(value if len(value) <= 20 else value[:19] + "…")
            self.query_one("#goto-error", Static).update(  # Text: what was typed is not markup
                Text(f"{shown!r} is not an operation number; type a whole number from 1 to {self.total}.")
            )
            return
        self.dismiss(number)

    def action_cancel(self) -> None:
        self.dismiss(None)
