"""The backward pass on the worksheet: its tables (``tables.py``; ``mla.py``, ``qk_all.py`` and ``state.py`` for
the variants that read backwards otherwise) and each cell's key line (``lines.py``, ``mla_lines.py``,
``state_lines.py``), named as ``names.py`` names a cell."""
