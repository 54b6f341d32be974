"""The small config file: the theme a user asked to remember (``--save-theme``), and nothing else.

$XDG_CONFIG_HOME/qkv-tui/config.toml (~/.config when unset), as the XDG base directory spec says.
Read only by the command line, never by QKVApp itself, so tests and notebooks see the defaults.

The file is a convenience, so a bad one never stops the app: a FIFO, a device or a folder in its
place is refused without being opened (opening a FIFO with no writer would wait for ever), and
one that is unreadable, too large or not valid TOML is skipped; each says so in one line, and the
app starts with the defaults.
"""

from __future__ import annotations

import os
import stat
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path

from qkv_tui.base.files import NotRegularError, TooLargeError, UnreadableError, file_kind, read_capped

THEME_NAMES = ("dark", "light")
MAX_BYTES = 64 * 1024  # the file holds one line; anything near this size is not ours


class ConfigError(Exception):
    """The config file cannot be used; ``str()`` says why, without the path."""


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "qkv-tui" / "config.toml"


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def read_config(path: Path | None = None) -> dict[str, object]:
    """The config file's table; {} when there is none. Raises ConfigError for a file it cannot use."""
    path = path or config_path()
    try:
        status = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot open: {_reason(exc) if isinstance(exc, OSError) else exc}") from None
    try:
        raw = read_capped(path, status, MAX_BYTES)
    except NotRegularError as problem:
        raise ConfigError(f"is {problem.kind}, not a regular file") from None
    except TooLargeError as problem:
        size = f"is {problem.size:,} bytes" if problem.size is not None else f"is more than {MAX_BYTES:,} bytes"
        raise ConfigError(f"{size}; a config file is at most {MAX_BYTES:,}") from None
    except UnreadableError as problem:
        raise ConfigError(f"cannot {problem.stage}: {_reason(problem.error)}") from None
    try:
        return tomllib.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise ConfigError("is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"is not valid TOML ({exc})") from None
    except (RecursionError, ValueError) as exc:  # deep nesting, an integer too long to convert
        raise ConfigError(f"is not valid TOML ({type(exc).__name__})") from None


def saved_theme(warn: Callable[[str], None] | None = None) -> str | None:
    """The theme saved with --save-theme, or None. A file that cannot be used, or a theme that is not
    dark or light, is passed to ``warn`` as one line (the path, what is wrong, what happens now)."""
    path = config_path()
    try:
        data = read_config(path)
    except ConfigError as exc:
        if warn is not None:
            warn(f"{path}: {exc}; starting with the default theme")
        return None
    theme = data.get("theme")
    if isinstance(theme, str) and theme in THEME_NAMES:
        return theme
    if theme is not None and warn is not None:
        shown = repr(theme) if isinstance(theme, str) else f"a {type(theme).__name__}"
        warn(f"{path}: theme = {shown[:40]}: expected \"dark\" or \"light\"; starting with the default theme")
    return None


def _umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it
    os.umask(mask)
    return mask


def save_theme(name: str) -> Path:
    """Remember ``name`` for later runs; returns the file written. Raises OSError when it cannot be.

    Written whole or not at all (a new file renamed over the old one). A symbolic link, as dotfile
    managers make, is followed so the link stays; anything there that is not a regular file (a FIFO
    would block the write for ever) is refused."""
    path = config_path()
    target = Path(os.path.realpath(path))
    try:
        status = os.stat(target)
    except FileNotFoundError:
        status = None
    if status is not None and (kind := file_kind(status.st_mode)) is not None:
        raise OSError(f"it is {kind}, not a regular file; remove it and try again")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(f'# written by qkv-tui --save-theme\ntheme = "{name}"\n')
        os.chmod(temporary, stat.S_IMODE(status.st_mode) if status else 0o666 & ~_umask())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
