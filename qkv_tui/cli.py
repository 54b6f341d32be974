"""Public path of the command line entry point (it lives in ``qkv_tui.edges.cli``)."""

from qkv_tui.edges.cli import main

__all__ = ["main"]
