"""--compare (contracts §16) with the parts registered since [value_scale]: a part whose faces do not say how it is
compared (differential attention's two maps, Mamba-2's L ∘ C·Bᵀ) is refused in one ``error:`` line that names it
and what is modelled (exit 2), never held against numbers of another computation; DeepSeek's indexer is modelled,
its selection every head's mask: a learner who masks the keys it left out agrees, and the mistakes are named with
that mask. The learner's numbers here are computed with NumPy alone from the file."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.core import variants
from qkv_tui.core.diagnose import refused
from qkv_tui.core.scenario import load_scenario

from .dsa_numpy import indexer_selection

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def _dsa(no_scale: bool = False, fill_zero: bool = False, full: bool = False) -> dict[str, np.ndarray]:
    """A learner's DeepSeek sparse attention of scenarios/dsa.toml: the indexer's top_k per query (ties to the
    earlier key), then one softmax head over the selected keys; optionally with one mistake."""
    doc = tomllib.loads((SCENARIOS / "dsa.toml").read_text(encoding="utf-8"))
    causal, selected = indexer_selection(doc)
    mask = causal if full else selected
    X = np.array(doc["X"], dtype=float)
    head = doc["heads"][0]
    Q, K, V = (X @ np.array(head[m], dtype=float) for m in ("W_Q", "W_K", "W_V"))
    scores = Q @ K.T
    scaled = scores if no_scale else scores / math.sqrt(Q.shape[1])
    logits = np.where(mask, scaled, 0.0 if fill_zero else -np.inf)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    weights = e / e.sum(axis=1, keepdims=True)
    return {"scores": scores, "scaled": np.where(mask, scaled, -np.inf), "weights": weights, "output": weights @ V}


def _saved(tmp_path: Path, arrays: dict[str, np.ndarray]) -> str:
    path = tmp_path / "mine.npz"
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return str(path)


@pytest.mark.parametrize(("name", "key"), [("differential", "differential"), ("ssd", "ssd")])
def test_a_part_it_does_not_model_is_refused_in_one_line(cli, tmp_path, name: str, key: str) -> None:
    sc = load_scenario(name)
    mine = _saved(tmp_path, {"output": np.zeros((sc.n, 1))})
    for args in (("--export", "json"), ()):
        run = cli(name, "--compare", mine, *args)
        assert run.code == 2 and run.out == ""
        assert run.err.count("\n") == 1 and run.err.startswith("error: ")
        assert f"--compare does not model [{key}]" in run.err
        assert "[indexer] (its selection as every head's mask)" in run.err  # what it does model


def test_every_registered_part_is_either_modelled_or_refused() -> None:
    parts = [t for t in variants.TABLES if t.faces is not None]
    assert {t.key for t in parts if t.faces is not None and t.faces.compared is None} >= {"differential", "ssd"}
    assert {t.key for t in parts if t.faces is not None and t.faces.compared is not None} >= {"indexer"}
    for name in ("dsa", "differential", "ssd", "causal_mask"):
        sc = load_scenario(name)
        said = refused(sc)
        unmodelled = [k for k in sc.parts if next(t for t in parts if t.key == k).faces.compared is None]  # type: ignore[union-attr]
        assert (said is None) == (not unmodelled), name


def test_a_learner_who_masks_the_keys_the_indexer_left_out_agrees(cli, tmp_path) -> None:
    run = cli("dsa", "--compare", _saved(tmp_path, _dsa()), "--export", "json")
    assert run.code == 0, run.err
    assert json.loads(run.out)["compare"]["agree"] is True


@pytest.mark.parametrize(("mistake", "name"), [({"no_scale": True}, "no_scale"),
                                               ({"fill_zero": True}, "mask_fill_zero")])
def test_a_mistake_is_named_with_the_selection_as_the_mask(cli, tmp_path, mistake: dict[str, bool], name: str) -> None:
    run = cli("dsa", "--compare", _saved(tmp_path, _dsa(**mistake)), "--export", "json")
    assert run.code == 1, run.err
    assert json.loads(run.out)["compare"]["diagnosis"] == [name]


def test_a_learner_who_ignores_the_indexer_differs_where_it_drops_a_key(cli, tmp_path) -> None:
    run = cli("dsa", "--compare", _saved(tmp_path, _dsa(full=True)), "--export", "json")
    assert run.code == 1
    first = json.loads(run.out)["compare"]["first"]
    # a masked cell of scaled agrees whatever it holds (§16), so the first difference is sat's weight of the
    assert (first["stage"], first["row"], first["col"]) == ("Softmax", 2, 0)
