"""The backward pass on the worksheet: its tables (``tables.py``; ``linear.py``, ``mla.py``, ``qk_norm.py`` and
``qk_all.py`` for the variants that read backwards otherwise, ``differential.py`` for a part that reads itself
backwards, found through ``parts.py``) and each cell's key line (``lines.py``, which asks each variant's face in
edges/faces/ and each part's sheet for the lines of its own tables: ``linear_lines.py``, ``mla_lines.py``, …),
named as ``names.py`` names a cell."""
