"""[mla], [linear], [deltanet] and [shared_kv] refuse one another by what the tables are (core/variants/refusals.py),
not by name: a table that replaces the softmax refuses any table parsed before it that builds its own heads, and
[shared_kv] any that keeps a state, each line written with the refused table's own header; a table that builds the
heads refuses the [gate] table, the [attention] form of a key of the heads, from the gate's own module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from qkv_tui.core.scenario import ScenarioError, _Validator, parse_scenario
from qkv_tui.core.variants import deltanet, linear, shared_kv
from qkv_tui.core.variants.common import Context

# tests/test_mla.py's small [mla] file
BASE = 'tokens = ["I", "love", "AI"]\nX = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]\nmask = "causal"\n'
MLA = """
[mla]
num_heads = 2
d_nope = 2
d_rope = 2
d_v = 2
W_DKV = [[1, 0], [0, 0], [0, 1], [1, 0]]
W_UK = [[1, 0, 0, 1], [0, 1, 1, 0]]
W_UV = [[1, 0, 1, 1], [0, 1, 0, 1]]
W_KR = [[0, 1], [1, 0], [0, 0], [0, 1]]
"""
W_Q = "W_Q = [[1, 0, 0, 1, 0, 1, 1, 0], [0, 1, 1, 0, 1, 0, 0, 1], [1, 0, 0, 0, 0, 0, 1, 0], [0, 0, 0, 1, 1, 1, 0, 0]]\n"


@dataclass(frozen=True)
class Latent:
    builds_heads: ClassVar[bool] = True


@dataclass(frozen=True)
class Stateful:
    state: ClassVar[bool] = True


def _ctx(earlier: dict[str, object]) -> Context:
    n = 3
    return Context(_Validator("f.toml"), ("a", "b", "c"), 2, False, (), "causal", np.tril(np.ones((n, n), dtype=bool)),
                   earlier=dict(earlier))


def _error(call: object) -> str:
    with pytest.raises(ScenarioError) as caught:
        call()  # type: ignore[operator]
    return caught.value.message


@pytest.mark.parametrize(("key", "parse"), [("linear", linear.parse_linear), ("deltanet", deltanet.parse_deltanet)])
def test_a_table_that_replaces_the_softmax_refuses_any_that_builds_the_heads(key: str, parse: object) -> None:
    said = _error(lambda: parse({}, _ctx({"latent": Latent()})))  # type: ignore[operator]
    assert said == (f"[latent] and [{key}] are both given; [{key}] replaces the softmax of [[heads]] or [attention]"
                    f" (expected one of [latent] or [{key}])")


def test_shared_kv_refuses_any_table_that_keeps_a_state() -> None:
    said = _error(lambda: shared_kv.parse_shared_kv({}, _ctx({"recurrent": Stateful()})))
    assert said == "[shared_kv] cannot be used with [recurrent]: [recurrent] keeps a state, not K and V another layer" \
                   " could hand over"


@pytest.mark.parametrize(("extra", "line"), [
    ('[linear]\nfeature = "elu1"\n', "[mla] and [linear] are both given; [linear] replaces the softmax of [[heads]] or"
                                     " [attention] (expected one of [mla] or [linear])"),
    ("[deltanet]\ng = [[-0.5]]\nbeta = [[1]]\n", "[mla] and [deltanet] are both given; [deltanet] replaces the softmax"
                                                 " of [[heads]] or [attention] (expected one of [mla] or [deltanet])"),
    ("[gate]\nW_G = [[1]]\n", "[mla] has no output gate; remove [gate]"),
    # the gate is refused first, as the loader reads the file before any table is parsed
    ('[gate]\nW_G = [[1]]\n[linear]\nfeature = "elu1"\n', "[mla] has no output gate; remove [gate]"),
])
def test_mla_files_say_the_same_lines(extra: str, line: str) -> None:
    assert _error(lambda: parse_scenario(BASE + MLA + W_Q + extra, "m.toml")) == line


STATE_FILE = '''tokens = ["a", "b", "c"]
X = [[1, 0], [0, 1], [1, 1]]
mask = "causal"
[attention]
num_heads = 1
W_Q = [[1, 0], [0, 1]]
[shared_kv]
source_layer = 2
K = [[[1, 1], [1, -1], [-1, 1]]]
V = [[[1, 1], [-1, 1], [1, -1]]]
'''


@pytest.mark.parametrize(("extra", "key"), [('[linear]\nfeature = "elu1"\n', "linear"),
                                            ("[deltanet]\ng = [[-0.5], [-0.5], [-0.5]]\nbeta = [[1], [1], [1]]\n",
                                             "deltanet")])
def test_shared_kv_files_refuse_a_state_in_one_line(extra: str, key: str) -> None:
    assert _error(lambda: parse_scenario(STATE_FILE + extra, "s.toml")) == (
        f"[shared_kv] cannot be used with [{key}]: [{key}] keeps a state, not K and V another layer could"
        " hand over")
