"""The importers' one exception: a one-line message the loader turns into a ScenarioError."""

from __future__ import annotations


def missing_package(package: str, needed_for: str) -> str:
    """The message for a dependency that is not importable (an install that went wrong, or a trimmed venv)."""
    return (f"{needed_for} needs the {package} package, which is not installed; it is one of qkv-tui's own"
            f" dependencies: pip install {package} (or reinstall qkv-tui)")


class ImporterError(Exception):
    """A [model] table that cannot be expanded; ``str()`` is one line naming the key or file and what was expected."""
