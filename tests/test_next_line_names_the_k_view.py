"""The last operation's "Next:" line names the k view by what it shows for the scenario: a head that carries a state
(linear attention, the gated delta rule, Kimi's KDA) is decoded with that state, and keeps no KV cache to replay."""

from __future__ import annotations

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.teach.stepper import Position


def next_line(name: str) -> str:
    comp = compute(load_scenario(name))
    presenter = Presenter(comp)
    last = len(presenter.exact) - 1
    notes = presenter.frame(Position(last, 0), Modes()).notes
    (line,) = [note for note in notes if note.startswith("Next: ")]
    return line


@pytest.mark.parametrize("name", ["linear", "deltanet", "deltanet_learns", "kda"])
def test_a_state_head_offers_decoding_with_its_state(name: str) -> None:
    line = next_line(name)
    assert "k decoding with a state" in line and "KV cache" not in line


@pytest.mark.parametrize("name", ["i_love_ai", "gqa", "mla"])
def test_a_softmax_head_offers_its_kv_cache(name: str) -> None:
    assert "k the KV cache" in next_line(name)
