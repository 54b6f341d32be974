"""An RMSNorm whose root is small (rows of small numbers: √(ms + eps) below ¼) still shows lines that check out
on a calculator: the spread it prints under the root carries more digits than the root, since the root moves
more than the spread does there. Found with [ssd]'s gated norm; [norm] shares the helper."""

from __future__ import annotations

import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.view import View
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text, explanation_text

SMALL = '''
tokens = ["a", "b"]
X = [[0.0123, -0.0311, 0.0271], [0.0452, 0.0067, -0.0198]]
[norm]
kind = "rms"
[[heads]]
W_Q = [[1], [0], [1]]
W_K = [[0], [1], [1]]
W_V = [[1], [1], [0]]
'''


@pytest.mark.parametrize("decimals", [2, 3, 5, 8])
def test_a_small_root_checks_out(decimals: int) -> None:
    comp = compute(parse_scenario(SMALL, "small.toml"))
    assert float(comp.norm.root.max()) < 0.25  # type: ignore[union-attr]
    assert_holds(check_text(to_markdown(comp, decimals)))
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals)))
