"""qkv-tui: scaled dot-product attention, one operation at a time.

Importing this package loads only the core (scenario, engine); never Textual.
"""

from __future__ import annotations

from qkv_tui.core.engine import Computation, HeadResult, compute
from qkv_tui.core.scenario import Scenario, ScenarioError, load_scenario

__version__ = "0.1.0"

__all__ = ["Computation", "HeadResult", "Scenario", "ScenarioError", "__version__", "compute", "load_scenario"]
