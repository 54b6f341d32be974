"""The state view's memory line counts a KV cache of (t + 1)·(dₖ + d_v) numbers.

It said 2·(t + 1)·dₖ, true only where d_v = dₖ: with d_v = 3 and dₖ = 2 it gave 12 at the third token
where the Recurrent stage of the same scenario rightly says 3·(2 + 3) = 15. The counts here come from
the head's own sizes, for linear attention and the delta rule."""

from __future__ import annotations

import re

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import builtin_dir, parse_scenario
from qkv_tui.display.state_view import memory_line


def widened(name: str) -> str:
    """The built-in with one more W_V column (d_v = dₖ + 1)."""
    text = (builtin_dir() / f"{name}.toml").read_text(encoding="utf-8")
    block = re.search(r"W_V = \[\n(.*?)\n\]", text, re.S)
    assert block is not None
    rows = [r.rstrip(",").strip() for r in block.group(1).splitlines() if r.strip().startswith("[")]
    wider = ",\n".join(f"  {r[:-1]}, {i % 2}]" for i, r in enumerate(rows))
    return text.replace(block.group(0), f"W_V = [\n{wider},\n]", 1)


@pytest.mark.parametrize("name", ["linear", "deltanet"])
def test_cache_count_uses_value_width(name: str) -> None:
    comp = compute(parse_scenario(widened(name), f"{name}.toml"))
    hr = comp.heads[0]
    assert hr.d_v != hr.d_k
    for t in range(comp.scenario.n):
        line = memory_line(hr, t)
        cache = int(re.search(r"= (\d+), and grow", line).group(1))  # type: ignore[union-attr]
        grow = int(re.search(r"grow by (\d+) a token", line).group(1))  # type: ignore[union-attr]
        assert cache == (t + 1) * (hr.d_k + hr.d_v)
        assert grow == hr.d_k + hr.d_v
