"""The importers' one exception: a one-line message the loader turns into a ScenarioError."""

from __future__ import annotations

EXTRA_HINT = "pip install 'qkv-tui[models]'"


class ImporterError(Exception):
    """A [model] table that cannot be expanded; ``str()`` is one line naming the key or file and what was expected."""
