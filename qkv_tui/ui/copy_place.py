"""The palette's "Copy this place": the command line that opens the app where it is now (teach/place.py)."""

from __future__ import annotations

import os
from pathlib import Path

from qkv_tui.teach.place import command_line
from qkv_tui.ui.session import Session


def scenario_words(app: Session, path: Path | None, builtin: bool) -> str:
    """How the command line names the scenario: a built-in by its name, a file by its path from here."""
    if path is None:
        return app.scenario.source  # --model's source: no file to name, the words given stand for it
    if builtin:
        return path.stem
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return str(path)
    return relative if not relative.startswith("..") else str(path)


def copy_place(app: Session, path: Path | None, builtin: bool) -> str:
    """Copy the trace's place as a command line to the clipboard (Textual's: the terminal's, or the browser's),
    say in a toast what was copied, and return it. In a side view the place is the trace's behind it."""
    line = command_line(scenario_words(app, path, builtin), app.trace, app.position, app.modes.decimals)
    app.copy_to_clipboard(line)
    behind = " (the trace's place behind this view)" if app.modes.side else ""
    app.notify(f"Copied{behind}: {line}", title="Copied to the clipboard", timeout=6)
    return line
