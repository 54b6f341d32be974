"""A head that keeps a state says so through its part's record (core/part_questions.py): it names the display
module that writes its decode lines (faces "state") and says what its map holds (map_formula), so the decode,
tiles and heads views name no variant. The expectations come from the scenario files' own tables."""

from __future__ import annotations

import pytest

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.display.state_view import carries_state, state_frame


@pytest.mark.parametrize("name", ["linear", "deltanet", "deltanet_learns", "kda"])
def test_a_state_head_names_its_lines_and_what_its_map_holds(name: str) -> None:
    sc = load_scenario(name)
    comp = compute(sc)
    assert carries_state(comp)
    said = ask.map_formula(comp.heads)
    assert said is not None
    text = "".join(piece for piece, _ in said)
    if sc.linear is not None:
        assert text == ("rownorm(φ(Q)·φ(K)ᵀ)·V" if sc.linear.normalize else "φ(Q)·φ(K)ᵀ·V")
    else:
        assert sc.deltanet is not None
        per_channel = sc.deltanet.channels is not None
        assert text == ("Σᵢ q[i]·e^(G_t[i] − G_s[i])·k[i]" if per_channel else "(q·kᵀ)·e^(G_t − G_s)") + " weighs δ"
    for head in range(len(comp.heads)):
        frame = state_frame(comp, sc.n - 1, head, 3)
        state = next(p for p in frame.focus if p.key.startswith("state@") or p.key == "state")
        assert state.values.shape == (comp.heads[head].d_k, comp.heads[head].d_v)


@pytest.mark.parametrize("name", ["i_love_ai", "ssd", "differential", "mla"])
def test_a_head_without_a_state_carries_none(name: str) -> None:
    comp = compute(load_scenario(name))
    assert not carries_state(comp)
