"""The NumPy array types every layer passes around, in a module of their own.

The loader (scenario.py) and the variants' parsers (variants.py) both need them; kept here, neither
has to import the other for a type. Shapes are written beside each use, e.g. ``# (n, d_k)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# npt.NDArray[np.float64] as NumPy defines it, spelled without numpy.typing: a module NumPy itself does not load,
# which every start would otherwise import for these three names
Matrix = np.ndarray[tuple[Any, ...], np.dtype[np.float64]]
BoolMatrix = np.ndarray[tuple[Any, ...], np.dtype[np.bool_]]
Vector = np.ndarray[tuple[Any, ...], np.dtype[np.float64]]
