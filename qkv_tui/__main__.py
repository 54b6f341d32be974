"""``python -m qkv_tui``: the same as the ``qkv-tui`` command."""

from .cli import main

raise SystemExit(main())
