"""--compare names each known mistake on numbers a learner's own implementation produced
(tests/learner_impl.py, written apart from the diagnosis), names the first cell that differs in the app's
order, and reports agreement for correct solutions written in the usual valid variations."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.edges.cli import main
from tests.learner_impl import make_case, save


def report(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> tuple[int, dict]:
    capsys.readouterr()
    status = main(["--tensors", str(path), "--layout", "torch", "--compare", str(path), "--export", "json", *extra])
    out = capsys.readouterr().out
    return status, json.loads(out)["compare"]


# each mistake with a case where it changes the numbers (k_not_transposed needs d_k = n: 4 tokens, d_k 4)
SINGLE = {
    "no_scale": ({"no_scale"}, {}),
    "scale_d_model": ({"scale_d_model"}, {}),
    "scale_d_k": ({"scale_d_k"}, {}),
    "softmax_axis": ({"softmax_axis"}, {}),
    "mask_after_softmax": ({"mask_after_softmax"}, {}),
    "mask_fill_zero": ({"mask_fill_zero"}, {}),
    "causal_off_by_one": ({"causal_off_by_one"}, {}),
    "k_not_transposed": ({"k_not_transposed"}, {}),
    "head_order": ({"head_order"}, {}),
    "rope_layout": ({"rope_layout"}, {"rope_theta": 10000.0}),
    "weight_transposed": ({"transposed_W_Q"}, {}),
    "k_v_swapped": ({"k_v_swapped"}, {}),
    "softmax_overflow": ({"softmax_overflow"}, {"scale": 30.0, "dtype": np.float32}),
}


@pytest.mark.parametrize("name", list(SINGLE))
def test_each_mistake_alone_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    bugs, kw = SINGLE[name]
    scale = kw.pop("scale", 1.0) if "scale" in kw else 1.0
    case = make_case(3, scale=scale, bugs=frozenset(bugs), **kw)  # type: ignore[arg-type]
    path = tmp_path / "mine.npz"
    save(case, str(path))
    status, rep = report(capsys, path)
    assert status == 1
    assert rep["agree"] is False
    assert rep["diagnosis"] == [name]


@pytest.mark.parametrize("bugs,names", [
    ({"no_scale", "softmax_axis"}, ["no_scale", "softmax_axis"]),
    ({"k_v_swapped", "mask_after_softmax"}, ["mask_after_softmax", "k_v_swapped"]),
    ({"scale_d_k", "causal_off_by_one"}, ["scale_d_k", "causal_off_by_one"]),
    ({"head_order", "no_scale"}, ["no_scale", "head_order"]),
])
def test_two_mistakes_together_are_both_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], bugs: set[str],
                                              names: list[str]) -> None:
    path = tmp_path / "mine.npz"
    save(make_case(5, bugs=frozenset(bugs)), str(path))
    status, rep = report(capsys, path)
    assert status == 1
    assert rep["diagnosis"] == names


@pytest.mark.parametrize("variation", ["minus_1e9", "float32", "additive_mask", "no_W_O", "one_head", "rope"])
def test_correct_solutions_agree_and_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str], variation: str) -> None:
    kw: dict[str, object] = {}
    if variation == "minus_1e9":
        kw["fill"] = -1e9
    if variation == "float32":
        kw["dtype"] = np.float32
    if variation == "no_W_O":
        kw["W_O"] = False
    if variation == "one_head":
        kw["heads"] = 1
    if variation == "rope":
        kw["rope_theta"] = 10000.0
    case = make_case(7, **kw)  # type: ignore[arg-type]
    path = tmp_path / "mine.npz"
    n = case.X.shape[0]
    if variation == "additive_mask":
        save(case, str(path), with_mask=False, mask=np.triu(np.full((n, n), -np.inf), 1))
    else:
        save(case, str(path))
    status, rep = report(capsys, path)
    assert (status, rep["agree"], rep["first"], rep["diagnosis"]) == (0, True, None, [])
    assert all(stage["agree"] for stage in rep["stages"])


def test_first_names_the_first_stage_and_cell_in_the_apps_order(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    case = make_case(11, bugs=frozenset({"no_scale"}))
    path = tmp_path / "mine.npz"
    save(case, str(path))
    _, rep = report(capsys, path)
    # scores agree (the scale comes after them); the Scale stage of head 0 differs first, at its first cell
    assert rep["stages"][0] == {"stage": "Score", "head": 0, "agree": True}
    assert (rep["first"]["stage"], rep["first"]["head"], rep["first"]["row"], rep["first"]["col"]) == ("Scale", 0, 0, 0)
    learner = np.load(path)["scaled"][0, 0, 0]
    assert rep["first"]["yours"] == pytest.approx(learner)
    assert rep["first"]["correct"] == pytest.approx(learner / 2.0)  # √d_k = 2


def test_a_late_difference_is_found_in_the_output_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = make_case(13, bugs=frozenset({"transposed_W_O"}))
    path = tmp_path / "mine.npz"
    save(case, str(path))
    status, rep = report(capsys, path)
    assert status == 1
    assert rep["first"]["stage"] == "W_O"
    assert [s["agree"] for s in rep["stages"][:-1]] == [True] * (len(rep["stages"]) - 1)
    assert rep["diagnosis"] == ["weight_transposed"]


def test_an_unknown_mistake_is_said_plainly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = make_case(17)
    path = tmp_path / "mine.npz"
    save(case, str(path))
    arrays = dict(np.load(path))
    arrays["attn"] = arrays["attn"] ** 2  # nobody's known mistake
    np.savez(path, **arrays)
    status, rep = report(capsys, path)
    assert status == 1 and rep["diagnosis"] == [] and rep["first"]["stage"] == "Softmax"
    assert "no known mistake" in rep["note"]


def test_nan_in_the_learners_results_is_a_difference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = make_case(19)
    path = tmp_path / "mine.npz"
    save(case, str(path))
    arrays = dict(np.load(path))
    arrays["out"][1, 2] = np.nan
    np.savez(path, **arrays)
    status, rep = report(capsys, path)
    assert status == 1 and (rep["first"]["stage"], rep["first"]["row"], rep["first"]["col"]) == ("W_O", 1, 2)
    assert rep["first"]["yours"] == "nan"


def test_masked_scores_may_hold_minus_inf_or_very_negative(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = make_case(23, fill=-1e9)
    path = tmp_path / "mine.npz"
    save(case, str(path))
    arrays = dict(np.load(path))
    n = case.X.shape[0]
    blocked = ~np.tril(np.ones((n, n), dtype=bool))
    arrays["scaled"] = np.where(blocked, -1e9, arrays["scaled"])
    arrays["scores"] = np.where(blocked, -np.inf, arrays["scores"])
    np.savez(path, **arrays)
    status, rep = report(capsys, path)
    assert (status, rep["agree"]) == (0, True)


def test_a_batch_and_head_axis_are_read_and_batch_picks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Q, K, V as (batch, heads, tokens, d): --batch 1 compares the second sequence; the first is wrong."""
    from tests.learner_impl import run

    cases = [make_case(29, bugs=frozenset({"no_scale"})), make_case(31)]
    runs = [run(c) for c in cases]
    qkv = {}
    for name, w in (("Q", "W_Q"), ("K", "W_K"), ("V", "W_V")):
        per = [(c.X @ getattr(c, w).T).reshape(4, 2, 4).transpose(1, 0, 2) for c in cases]
        qkv[name] = np.stack(per)
    path = tmp_path / "batch.npz"
    np.savez(path, **qkv, mask=np.tril(np.ones((4, 4), dtype=bool)),
             attn=np.stack([r["attn"] for r in runs]), scores=np.stack([r["scores"] for r in runs]))
    capsys.readouterr()
    assert main(["--tensors", str(path), "--compare", str(path), "--export", "json", "--batch", "1"]) == 0
    capsys.readouterr()
    assert main(["--tensors", str(path), "--compare", str(path), "--export", "json", "--batch", "0"]) == 1
    rep = json.loads(capsys.readouterr().out)["compare"]
    assert rep["diagnosis"] == ["no_scale"]


def test_a_batch_of_x_with_batched_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """X as (batch, tokens, d_model), results as (batch, heads, …) and (batch, tokens, d_out), a mask with
    (1, 1, n, n) in front: --batch picks the sequence; the second sequence's softmax went over the wrong axis."""
    from dataclasses import replace

    from tests.learner_impl import run

    first = make_case(1)
    second = replace(first, X=make_case(2).X, bugs=frozenset({"softmax_axis"}))
    runs = [run(first), run(second)]
    path = tmp_path / "batch.npz"
    np.savez(path, X=np.stack([first.X, second.X]), W_Q=first.W_Q, W_K=first.W_K, W_V=first.W_V, W_O=first.W_O,
             num_heads=2, mask=np.tril(np.ones((4, 4), dtype=bool))[None, None],
             **{key: np.stack([r[key] for r in runs]) for key in ("scores", "attn", "out")})
    status, rep = report(capsys, path, "--batch", "0")
    assert (status, rep["agree"]) == (0, True)
    status, rep = report(capsys, path, "--batch", "1")
    assert (status, rep["diagnosis"], rep["first"]["stage"]) == (1, ["softmax_axis"], "Softmax")


def test_overflow_in_float64_is_named_not_an_arithmetic_error(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """exp past float64's 709 in the learner's softmax: the diagnosis recomputes it (and overflows) under the
    command line's rule that an overflow is an error, and still names it, with exit 1, not 2."""
    case = make_case(3, scale=200.0, bugs=frozenset({"softmax_overflow"}))
    path = tmp_path / "mine.npz"
    save(case, str(path))
    assert np.isnan(np.load(path)["attn"]).any()  # the learner's own NaN: e^s overflowed to inf/inf
    status, rep = report(capsys, path)
    assert (status, rep["diagnosis"]) == (1, ["softmax_overflow"])
