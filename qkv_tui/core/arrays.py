"""The NumPy array types every layer passes around, in a module of their own.

The loader (scenario.py) and the variants' parsers (variants.py) both need them; kept here, neither
has to import the other for a type. Shapes are written beside each use, e.g. ``# (n, d_k)``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float64]
BoolMatrix = npt.NDArray[np.bool_]
Vector = npt.NDArray[np.float64]
