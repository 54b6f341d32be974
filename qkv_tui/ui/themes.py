"""Themes: a dark one for screens, a light one for projectors.

Their colours are the stylesheet's (qkv.tcss: each highlight is a component class of its widget,
styled under ``:dark`` and ``:light``), so switching the theme restyles every widget. The
highlights never rely on hue alone (qkv.tcss says how). A learner's choice is remembered
between runs only when asked (``--save-theme``: edges/config.py).
"""

from __future__ import annotations

THEMES = {"dark": "textual-dark", "light": "textual-light"}  # our names -> Textual's themes
