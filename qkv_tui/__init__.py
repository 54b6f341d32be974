"""qkv-tui: scaled dot-product attention, one operation at a time.

Importing this package loads only the core (scenario, engine); never Textual.
"""

from __future__ import annotations

import gc
import os

# One BLAS thread, set before NumPy loads: the matrices here are small (a (32, 576)·(576, 576) product), and
# OpenBLAS's second thread made that product 20× slower, not 2× faster, on a busy 2-core machine (63 ms
# against 3 ms measured), where a classroom's thirty apps share the cores. A setting of the user's own wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from qkv_tui.core.engine import Computation, HeadResult, compute
from qkv_tui.core.scenario import Scenario, ScenarioError, load_scenario

# What the imports so far made (NumPy's, the core's modules and tables) lives as long as the process: frozen, the
# cyclic collector no longer walks it. Without this, a start's imports reached the collector's first full pass
# (every object of every module, 8-12 ms) just before the first frame, where a bare Textual app stops short of it.
# Reference counting still frees what these objects drop; only cycles among them would stay, and imports make
# next to none (the --serve app starter does the same, with every module: edges/serve/zygote.py).
gc.freeze()

__version__ = "0.1.0"

__all__ = ["Computation", "HeadResult", "Scenario", "ScenarioError", "__version__", "compute", "load_scenario"]
