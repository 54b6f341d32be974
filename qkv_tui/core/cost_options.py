"""The cost view's and ``--export cost``'s choices (``--dtype``, ``--context``): bytes per number by dtype and the
defaults. A module of their own, so the command line's parser offers them without loading the counting
(core/cost.py), which the first screen never shows."""

DTYPES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}
DEFAULT_DTYPE = "bf16"
DEFAULT_CONTEXT = 4096
MAX_CONTEXT = 2**40  # past a trillion tokens no cache exists; a bound keeps every figure a sane integer
