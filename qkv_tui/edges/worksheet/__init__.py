"""The printable worksheet (``--export worksheet``; docs/worksheets.md), as its own package.

What goes on a page is built once, as data, for every format: ``make.py`` (the tables of every stage, blanks
chosen), ``chain.py`` (each table computed from the printed tables before it), ``working.py`` (a key line's
arithmetic with the printed operands), ``content.py`` and ``sheet.py`` (the blocks in page order). ``backward/``
adds the backward pass's tables and key lines for scenarios with ``[backward]``. ``render/`` lays the same blocks
out as Markdown, HTML or Typst (PDF), with ``formulas.py`` setting the notation as math. ``export.py`` is the
command line's side: the format, the separate key, the output file.
"""
