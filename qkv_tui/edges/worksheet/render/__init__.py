"""One worksheet, three renderers of the same blocks: ``markdown.py``, ``html.py`` and ``typst.py`` (the PDF),
with ``formulas.py`` setting the app's plain notation as Typst math or MathML."""
