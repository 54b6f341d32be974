"""--tensors and --compare: every malformed file is one ``error:`` line naming the array, its shape and
what was expected, with exit 2 (docs/my-attention-is-wrong.md); .pt is read through PyTorch's weights_only loader,
an unsafe pickle is refused, and without PyTorch the line says how to save an .npz."""

from __future__ import annotations

import json
import pickle
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.edges.cli import main
from tests.learner_impl import make_case, run, save


def one_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    try:
        status = main(argv)
    except SystemExit as stop:  # the parser's own errors exit from inside it
        status = int(stop.code or 0)
    assert status == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


def good_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"X": rng.normal(size=(4, 6)), "W_Q": rng.normal(size=(3, 6)), "W_K": rng.normal(size=(3, 6)),
            "W_V": rng.normal(size=(2, 6))}


def with_(tmp_path: Path, name: str = "mine.npz", **changes: np.ndarray | None) -> Path:
    arrays = good_arrays()
    for key, value in changes.items():
        if value is None:
            del arrays[key]
        else:
            arrays[key] = value
    path = tmp_path / name
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


@pytest.mark.parametrize("changes,words", [
    ({"W_Q": None}, ["expected X with W_Q, W_K and W_V, or Q, K and V", "found: X, W_K, W_V"]),
    ({"W_Q": np.ones((3, 5))}, ["W_Q is 3×5", "d_model 6"]),
    ({"W_K": np.ones((4, 6))}, ["W_Q is 3×6 and W_K 4×6", "same width d_k"]),
    ({"X": np.array([[np.nan] * 6] * 4)}, ["X holds nan at index [0, 0]", "finite"]),
    ({"X": np.ones(6)}, ["X is 6 (1-D)", "tokens × d_model"]),
    ({"mask": np.ones((3, 4), dtype=bool)}, ["mask is 3×4", "expected 4 × 4"]),
    ({"mask": np.full((4, 4), 0.5)}, ["mask holds 0.5 at [0, 0]", "additive mask of 0"]),
    ({"mask": np.eye(4, dtype=bool) & False}, ["mask row 0 lets query 0 attend no key"]),
    ({"W_O": np.ones((5, 7))}, ["W_O is 5×7", "2 output columns"]),
    ({"num_heads": np.array(2)}, ["W_Q is 3×6; its width 3 does not split into num_heads = 2"]),
])
def test_a_malformed_input_array_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              changes: dict[str, np.ndarray | None], words: list[str]) -> None:
    line = one_error(capsys, ["--tensors", str(with_(tmp_path, **changes)), "--export", "json"])
    assert line.startswith("error: ")
    for word in words:
        assert word in line, line


def test_square_weights_ask_for_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sq.npz"
    save(make_case(1), str(path))
    line = one_error(capsys, ["--tensors", str(path), "--export", "json"])
    assert "W_Q is 8×8" in line and "--layout torch or --layout math" in line


def test_the_layout_read_from_the_shapes_needs_no_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """nn.Linear's (out × in) and x·W's (in × out) each read right where only one fits: the same numbers."""
    arrays = good_arrays()
    np.savez(tmp_path / "torch.npz", **arrays)
    np.savez(tmp_path / "math.npz", **{k: (v if k == "X" else v.T) for k, v in arrays.items()})
    outs = []
    for name in ("torch", "math"):
        capsys.readouterr()
        assert main(["--tensors", str(tmp_path / f"{name}.npz"), "--export", "json"]) == 0
        outs.append(json.loads(capsys.readouterr().out)["output"])
    assert outs[0] == outs[1]


def test_batch_out_of_range_and_batch_without_batch_axis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arrays = good_arrays()
    np.savez(tmp_path / "b.npz", **{**arrays, "X": np.stack([arrays["X"]] * 2)})
    line = one_error(capsys, ["--tensors", str(tmp_path / "b.npz"), "--batch", "2", "--export", "json"])
    assert "--batch 2 is out of range" in line and "0 … 1" in line
    line = one_error(capsys, ["--tensors", str(with_(tmp_path)), "--batch", "1", "--export", "json"])
    assert "no batch axis" in line


def test_results_of_the_wrong_shape_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = with_(tmp_path, scores=np.ones((3, 4)))
    line = one_error(capsys, ["--tensors", str(path), "--compare", str(path), "--export", "json"])
    assert "scores is 3×4; expected 4 × 4" in line
    path = with_(tmp_path, "none.npz")
    line = one_error(capsys, ["--tensors", str(path), "--compare", str(path), "--export", "json"])
    assert "no results to compare" in line
    path = with_(tmp_path, "both.npz", attn=np.ones((4, 4)), weights=np.ones((4, 4)))
    assert "both weights and attn given" in one_error(
        capsys, ["--tensors", str(path), "--compare", str(path), "--export", "json"])


@pytest.mark.parametrize("name,content,words", [
    ("mine.npz", b"not a zip", "not a readable .npz file"),
    ("mine.txt", b"X = 1", "expected a .npz, .safetensors or .pt/.pth file"),
    ("mine.safetensors", b"\x10\x00", "not a safetensors file"),
    ("mine.pt", b"garbage", "not a readable PyTorch file"),
])
def test_a_file_that_is_not_its_format_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                                                    content: bytes, words: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    assert words in one_error(capsys, ["--tensors", str(path), "--export", "json"])


def test_a_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "no such file" in one_error(capsys, ["--tensors", str(tmp_path / "gone.npz"), "--export", "json"])


def test_an_object_array_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "obj.npz"
    np.savez(path, X=np.array([{"a": 1}], dtype=object))
    assert "expected plain number arrays" in one_error(capsys, ["--tensors", str(path), "--export", "json"])


class Payload:
    """Not a tensor: PyTorch's weights_only loader refuses to build it."""


def test_pt_files_read_and_unsafe_pickles_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    arrays = good_arrays()
    good = tmp_path / "mine.pt"
    torch.save({k: torch.tensor(v, dtype=torch.float32) for k, v in arrays.items()}, good)
    capsys.readouterr()
    assert main(["--tensors", str(good), "--export", "json"]) == 0
    bad = tmp_path / "bad.pt"
    torch.save({"X": Payload()}, bad)
    line = one_error(capsys, ["--tensors", str(bad), "--export", "json"])
    assert "refused" in line and "numpy.savez" in line
    listed = tmp_path / "list.pt"
    torch.save([torch.zeros(2)], listed)
    assert "expected torch.save of a dict of tensors" in one_error(capsys, ["--tensors", str(listed), "--export", "json"])


def test_pt_without_pytorch_says_how_to_save_an_npz(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "mine.pt"
    path.write_bytes(pickle.dumps({"X": 1}))
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError, as without it installed
    line = one_error(capsys, ["--tensors", str(path), "--export", "json"])
    assert "needs PyTorch, which is not installed" in line and "numpy.savez('mine.npz'" in line


def _safetensors(path: Path, arrays: dict[str, np.ndarray]) -> None:
    header, blobs, offset = {}, [], 0
    for name, array in arrays.items():
        dtype = {"float32": "F32", "float64": "F64", "bool": "BOOL"}[str(array.dtype)]
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_safetensors_with_a_bool_mask_reads_and_agrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = make_case(2, dtype=np.float32)
    results = run(case)
    arrays = {"X": case.X.astype(np.float32), "W_Q": case.W_Q.astype(np.float32), "W_K": case.W_K.astype(np.float32),
              "W_V": case.W_V.astype(np.float32), "W_O": case.W_O.astype(np.float32),  # type: ignore[union-attr]
              "num_heads": np.array([2.0], dtype=np.float32), "mask": np.tril(np.ones((4, 4), dtype=bool)),
              "attn": results["attn"].astype(np.float32), "out": results["out"].astype(np.float32)}
    path = tmp_path / "mine.safetensors"
    _safetensors(path, arrays)
    capsys.readouterr()
    status = main(["--tensors", str(path), "--layout", "torch", "--compare", str(path), "--export", "json"])
    assert status == 0, capsys.readouterr().err


@pytest.mark.parametrize("argv,words", [
    (["--layout", "torch", "i_love_ai", "--export", "json"], "--layout goes with --tensors FILE"),
    (["--batch", "1", "i_love_ai"], "--batch goes with --tensors FILE"),
    (["--tensors", "a.npz", "i_love_ai", "--export", "json"], "give --tensors FILE or a SCENARIO, not both"),
    (["--tensors", "a.npz", "--model", "m", "--text", "hi"], "give --tensors FILE or --model SOURCE, not both"),
    (["--tensors", "a.npz", "--serve"], "not --serve"),
    (["--compare", "a.npz", "--check", "i_love_ai"], "--compare goes with the app or --export json"),
    (["--compare", "a.npz", "--export", "markdown", "i_love_ai"], "--compare goes with the app or --export json"),
    (["--rtol", "0.1", "i_love_ai", "--export", "json"], "--rtol goes with --compare FILE"),
    (["--compare", "a.npz", "--atol", "-1", "i_love_ai", "--export", "json"], "--atol -1.0: expected a number >= 0"),
    (["--tensors", "a.npz", "--batch", "-1", "--export", "json"], "--batch -1: expected a sequence's index from 0"),
])
def test_options_where_they_cannot_go_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                   words: str) -> None:
    assert words in one_error(capsys, argv)
