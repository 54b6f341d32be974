"""The small config file: the theme a user asked to remember (``--save-theme``), and nothing else.

$XDG_CONFIG_HOME/qkv-tui/config.toml (~/.config when unset), as the XDG base directory spec says.
Read only by the command line, never by QKVApp itself, so tests and notebooks see the defaults.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

THEME_NAMES = ("dark", "light")


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "qkv-tui" / "config.toml"


def saved_theme() -> str | None:
    """The theme saved with --save-theme, or None (no file, an unreadable one, or an unknown name)."""
    try:
        data = tomllib.loads(config_path().read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    theme = data.get("theme")
    return theme if isinstance(theme, str) and theme in THEME_NAMES else None


def save_theme(name: str) -> Path:
    """Remember ``name`` for later runs; returns the file written. Raises OSError when it cannot be."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'# written by qkv-tui --save-theme\ntheme = "{name}"\n', encoding="utf-8")
    return path
