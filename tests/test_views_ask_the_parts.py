"""The tiles, fused-kernel, cache and summary views ask a head's parts generic questions (core/part_questions.py)
instead of naming a variant's record (issue 30): no variant's name in their code, as benchmarks/variant_reach.py
reads it; the counter itself counts RoPE only as a word part; and the parts' answers give the numbers a softmax
with a soft-cap, ALiBi's bias and a sink gives, computed here by loops."""

from __future__ import annotations

import ast
import importlib.util
import math
import re
from types import ModuleType

import numpy as np

from qkv_tui import compute
from qkv_tui.core import part_questions as ask
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.kernels.attention import attend

from .conftest import ROOT

VIEWS = ("teach/tiled.py", "teach/tiled_backward.py", "teach/fused.py", "teach/decode.py", "teach/summary.py",
         "display/tiled_view.py", "display/tiled_back_view.py", "display/decode_view.py")

# one head with all three softmax options: a soft-cap of 2, ALiBi's slope 0.5 and a sink of 0.25, causal
EVERY_OPTION = """
tokens = ["a", "b", "c", "d"]
X = [[1, 0, 2], [0, 1, -1], [2, 1, 0], [-1, 2, 1]]
mask = "causal"

[alibi]
slopes = [0.5]

[[heads]]
name = "h"
sink = 0.25
softcap = 2.0
W_Q = [[1, 0], [0, 2], [1, 1]]
W_K = [[2, 1], [0, 1], [1, 0]]
W_V = [[1, 0], [0, 1], [1, 1]]
"""


def _reach() -> ModuleType:
    spec = importlib.util.spec_from_file_location("variant_reach", ROOT / "benchmarks" / "variant_reach.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_views_name_no_variant() -> None:
    reach = _reach()
    named = {}
    for view in VIEWS:
        used = reach.names_in(ast.parse((ROOT / "qkv_tui" / view).read_text(encoding="utf-8")))
        for variant, pattern in reach.VARIANTS.items():
            hits = sorted(n for n in used if re.search(pattern, n))
            if hits:
                named[(view, variant)] = hits
    assert not named, named


def test_the_counter_reads_rope_as_a_word_part() -> None:
    rope = re.compile(_reach().VARIANTS["rope"])
    for name in ("rope", "rope_theta", "d_rope", "NO_ROPE", "RopeSpec", "Rotated", "Q_rot", "turn_of", "_plain_rope"):
        assert rope.search(name), name
    for name in ("property", "cached_property", "DropEditsScreen", "roper", "europe"):
        assert not rope.search(name), name


def _by_loops(Q: np.ndarray, K: np.ndarray, V: np.ndarray, scale: float, cap: float, slope: float,
              sink: float) -> tuple[np.ndarray, np.ndarray]:
    """(logits, weights) of a causal head: cap·tanh(q·k/scale/cap) + slope·(j − i), the sink one more column."""
    n = Q.shape[0]
    logits = np.full((n, n), -math.inf)
    weights = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1):
            s = sum(float(Q[i, t]) * float(K[j, t]) for t in range(Q.shape[1])) / scale
            logits[i, j] = cap * math.tanh(s / cap) + slope * (j - i)
        top = max(max(logits[i, : i + 1]), sink)
        e = [math.exp(logits[i, j] - top) for j in range(i + 1)]
        total = sum(e) + math.exp(sink - top)
        weights[i, : i + 1] = [x / total for x in e]
    return logits, weights


def test_the_parts_answers_give_the_softmax_of_every_option() -> None:
    comp = compute(parse_scenario(EVERY_OPTION, "every_option.toml"))
    hr = comp.heads[0]
    allow = comp.scenario.allow
    logits, weights = _by_loops(hr.Q_used, hr.K_used, hr.V, hr.scale, 2.0, 0.5, 0.25)
    # the step, then the term: what the softmax reads, as the tiles and the fused kernel rebuild it
    np.testing.assert_allclose(ask.logits(hr, hr.scaled)[allow], logits[allow], rtol=1e-12)
    assert ask.term_name(hr) == "bias" and ask.beside(hr) == 0.25
    # the cache view replays the head with its parts' options: the same weights, the sink's share beside them
    replay = attend(hr.Q_used, hr.K_used, hr.V, allow, hr.scale, **ask.softmax_options(hr))
    np.testing.assert_allclose(replay.softmax.weights, weights, rtol=1e-12, atol=1e-15)
    share = ask.beside_share(hr)
    assert share is not None
    np.testing.assert_allclose(weights.sum(axis=1) + share, 1.0, rtol=1e-12)
    # a window of rows and keys, as a decode step reads it
    window = attend(hr.Q_used[2:4], hr.K_used[:4], hr.V[:4], allow[2:4, :4], hr.scale,
                    **ask.softmax_options(hr, slice(2, 4), slice(0, 4)))
    added = ask.term(hr, slice(2, 4), slice(0, 4))
    assert window.stepped is not None and added is not None
    kept = allow[2:4, :4]
    np.testing.assert_allclose((window.stepped + added)[kept], logits[2:4, :4][kept], rtol=1e-12)
    np.testing.assert_allclose(window.softmax.weights[kept], weights[2:4, :4][kept], rtol=1e-12)


def test_a_head_without_parts_has_no_answers() -> None:
    plain = EVERY_OPTION.replace("[alibi]\nslopes = [0.5]\n", "").replace("sink = 0.25\nsoftcap = 2.0\n", "")
    hr = compute(parse_scenario(plain, "plain.toml")).heads[0]
    assert ask.stepper(hr) is None and ask.term(hr) is None and ask.beside(hr) is None
    assert ask.softmax_options(hr) == {} and ask.said(hr, "tiles.start") == [] and ask.scored_suffix(hr) == ""
    np.testing.assert_array_equal(ask.logits(hr, hr.scaled), hr.scaled)
