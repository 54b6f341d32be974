"""Real models -> plain scenario data (docs/real-models.md). The lowest layer: imports no other qkv_tui layer.

``expand_model(doc, base)`` turns a parsed scenario file with a ``[model]`` table into the dict
an ordinary file would parse to; the core's loader validates that like any file. Errors are
:class:`ImporterError` with a one-line message. glassllm and tokenizers (ordinary dependencies)
are imported only when a source needs them, so a hand-made scenario never loads them.
"""

from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.expand import expand_model

__all__ = ["ImporterError", "expand_model"]
