"""Real models -> plain scenario data (contracts §8). The lowest layer: imports no other qkv_tui layer.

``expand_model(doc, base)`` turns a parsed scenario file with a ``[model]`` table into the dict
an ordinary file would parse to; the core's loader validates that like any file. Errors are
:class:`ImporterError` with a one-line message. The optional extra (``pip install
'qkv-tui[models]'``: glassllm, tokenizers, safetensors) is imported only when a source needs it.
"""

from qkv_tui.importers.errors import EXTRA_HINT, ImporterError
from qkv_tui.importers.expand import expand_model

__all__ = ["EXTRA_HINT", "ImporterError", "expand_model"]
