"""A lecture's backward scenario for the worksheet tests of --stages, --heads and the SGD step: four tokens, two
heads, every 2026 variant (pre-norm, QK-norm, RoPE, soft-cap, sinks, an output gate) and W_O, with [backward]."""

from __future__ import annotations

from qkv_tui.core.engine import Computation, compute
from qkv_tui.core.scenario import parse_scenario

LESSON = """\
title = "Every 2026 variant, with a backward pass"
tokens = ["the", "cat", "sat", "down"]
X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0], [0, 0, 1, 1]]
mask = "causal"
softcap = 5.0

[norm]
kind = "rms"

[attention]
num_heads = 2
sinks = [0.5, -0.5]
W_Q = [[1, 0, 0, 1], [0, 1, 1, 0], [1, 0, 0, 0], [0, 1, 0, 0]]
W_K = [[0, 1, 1, 0], [1, 0, 0, 1], [0, 1, 0, 0], [1, 0, 0, 0]]
W_V = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]

[gate]
W_G = [[1, 0, 0, 1], [0, 1, 1, 0], [1, 0, 0, 0], [0, 1, 0, 0]]

[qk_norm]
over = "head"

[rope]
layout = "half"

[output]
W_O = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]

[backward]
target = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0], [0, 0, 1, 1]]
lr = 0.1
"""


def lesson() -> Computation:
    return compute(parse_scenario(LESSON, "lesson.toml"))
