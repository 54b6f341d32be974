"""--compare in the app: it opens at the first cell that differs (the operation that computes it), with a
notice giving the learner's number beside the right one, the stages that agreed and the mistake named.
And --compare with a scenario file rather than --tensors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.core.diagnose import forward, problem_of
from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.edges import compare as learner
from qkv_tui.edges.cli import main
from qkv_tui.teach.trace import Trace
from tests.learner_impl import make_case, save


def _args(path: Path) -> argparse.Namespace:
    return argparse.Namespace(tensors=str(path), layout="torch", batch=None, compare=str(path), rtol=None, atol=None)


def test_the_app_opens_at_the_first_cell_that_differs(tmp_path: Path) -> None:
    path = tmp_path / "mine.npz"
    save(make_case(3, bugs=frozenset({"causal_off_by_one"})), str(path))
    args = _args(path)
    scenario = learner.tensors_loader(args)(str(path))
    comp = compute(scenario)
    place, notice = learner.app_place(args, comp)
    assert place is not None
    seg = Trace(comp).segment_at(place.index)
    # the first difference: head 0's Softmax, row 0, col 0 (query 0 also sees key 1, one ahead, so its own
    # weight is less than 1)
    assert (seg.target, place.head, place.index - seg.start) == ("weights", 0, 0)
    yours = float(np.load(path)["attn"][0, 0, 0])
    assert yours < 1
    assert notice.splitlines()[0] == f"differs: Softmax of head 1 [t0,t0]: yours {yours:.3f}, correct 1.000"
    assert "agree: Score, Scale (head 1); Score, Scale (head 2)" in notice
    assert "diagnosis: causal_off_by_one" in notice


@pytest.mark.asyncio
async def test_the_notice_is_on_screen(tmp_path: Path) -> None:
    from qkv_tui.ui.compare_notice import noticed

    path = tmp_path / "mine.npz"
    save(make_case(3, bugs=frozenset({"no_scale"})), str(path))
    args = _args(path)
    scenario = learner.tensors_loader(args)(str(path))
    comp = compute(scenario)
    place, notice = learner.app_place(args, comp)
    app = noticed(notice)(scenario, computation=comp, place=place)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        messages = [n.message for n in app._notifications]
        assert any("diagnosis: no_scale" in m for m in messages)
        assert app.position == place


def test_compare_with_a_scenario_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The learner did the built-in I love AI by hand: their weights without the scale are named no_scale."""
    sc = load_scenario("i_love_ai")
    p = problem_of(sc)
    assert not isinstance(p, str)
    S = sc.X @ sc.heads[0].W_Q @ (sc.X @ sc.heads[0].W_K).T
    e = np.exp(S - S.max(axis=1, keepdims=True))
    np.savez(tmp_path / "hand.npz", scores=S, weights=e / e.sum(axis=1, keepdims=True))
    assert main(["i_love_ai", "--compare", str(tmp_path / "hand.npz"), "--export", "json"]) == 1
    report = json.loads(capsys.readouterr().out)["compare"]
    assert report["diagnosis"] == ["no_scale"] and report["first"]["stage"] == "Softmax"


@pytest.mark.parametrize("name", ["i_love_ai", "causal_mask", "split_heads", "cross_attention",
                                  "padding_mask", "custom_mask", "rope", "rope_layouts", "sixteen_tokens"])
def test_the_diagnosis_reference_is_the_engine(name: str) -> None:
    """The right computation the mistakes are applied to agrees with the engine on every plain built-in."""
    sc = load_scenario(name)
    comp = compute(sc)
    p = problem_of(sc)
    assert not isinstance(p, str), p
    right = forward(p)
    for h, head in enumerate(comp.heads):
        for key, mine in (("scores", right.scores[h]), ("scaled", right.scaled[h]), ("weights", right.weights[h]),
                          ("output", right.mix[h])):
            np.testing.assert_allclose(mine, getattr(head, key), rtol=1e-12, atol=1e-12, err_msg=f"{name} {key}")
    np.testing.assert_allclose(right.final, comp.output, rtol=1e-12, atol=1e-12)
