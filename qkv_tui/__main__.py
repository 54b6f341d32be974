"""``python -m qkv_tui``: the same as the ``qkv-tui`` command."""

from qkv_tui.edges.cli import main

raise SystemExit(main())
