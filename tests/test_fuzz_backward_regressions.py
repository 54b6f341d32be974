"""What the fuzzing of [backward] beside [mla], [linear] and [deltanet] found (tests/test_fuzz_backward.py), each kept
as the generated example that showed it, run through every path (tests/fuzz_backward_paths.py)."""

from __future__ import annotations

import json

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import builtin_dir, parse_scenario
from qkv_tui.edges.export_json import to_json

from .fuzz_backward_paths import assert_backward_paths
from .fuzz_paths import run

# an overflow the code does not expect shows as a NumPy warning before it shows as a wrong number
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

FOUND = {
    # one SGD step turns every φ(q)·φ(k) of a relu row to 0: --check said ok and the Train view stopped there, but
    # --export json refused the whole file, saying the file's own denominator was 0 (it is not: step 1's is)
    "relu_row_dies_after_a_step": (
        'tokens = ["t0", "t1", "t2", "t3"]\nX = [[2, -1.97], [0.21, -1], [-1, -1.42], [-2, -2]]\nmask = "causal"\n'
        '[norm]\nkind = "rms"\n[rope]\nlayout = "interleaved"\nbase = 10000.0\npositions = [7, 0, 4, 8]\n[[heads]]\n'
        'name = "h0"\nW_Q = [[0, -0.0, -3, 1], [-3, 1.0, -1, -1]]\nW_K = [[1, -3, -2, 0.0], [-2, 1.36, 0.0, 1.23]]\n'
        'W_V = [[0], [-3]]\nb_K = [-3, 0.69, -3, 2]\nW_G = [[1], [0]]\n[linear]\nfeature = "relu"\nnormalize = true\n'
        '[backward]\ntarget = [[-2], [-0.0], [3], [-1]]\nlr = 0.5\nsteps = 1\n'
        'train = ["W_G", "b_K", "W_K", "gamma", "W_Q", "W_V"]\n', 4),
    # elu + 1 below 0 by hand: the slope eˣ was written down rounded (e^(-5.87) = 0.00 at 2 decimals) before it
    # multiplied, but the line showed only e^(-5.87), so dK = (-9.91)·e^(-5.87) read 0.00 and not -0.03
    "elu1_slope_by_hand": (
        'tokens = ["t0", "t1", "t2", "t3"]\nX = [[1, 0.31, -0.68, 0], [0.68, 0.72, -1.05, -2], [-3, -1, -0.0, -1],'
        ' [-1, -3, 0.0, 2]]\nmask = "causal"\n[[heads]]\nname = "h0"\nW_Q = [[0], [0.0], [-0.5], [-2]]\n'
        'W_K = [[-0.0], [-2], [1], [1.69]]\nW_V = [[0], [1], [0.0], [1.21]]\nb_V = [2]\n[linear]\nfeature = "elu1"\n'
        'normalize = true\n[backward]\ntarget = [[0], [1], [1], [0]]\n', 1),
}


@pytest.mark.parametrize("case", sorted(FOUND))
def test_what_fuzzing_found_now_passes_every_path(case: str) -> None:
    text, decimals = FOUND[case]
    assert assert_backward_paths(text, decimals) is True


def test_a_step_that_cannot_be_computed_ends_the_json_train_list_saying_why() -> None:
    text, _ = FOUND["relu_row_dies_after_a_step"]
    train = json.loads(to_json(compute(parse_scenario(text, "relu.toml"))))["train"]
    assert [s["step"] for s in train] == [0, 1] and "loss" in train[0]
    assert train[1]["stopped"].startswith("step 1 of 1 (lr = 0.5) cannot be computed: h0: [linear]'s denominator")


@pytest.mark.parametrize(("name", "old", "says"), [
    ("learn_to_look", "lr = 0.5", 'step 1 of 6 (lr = 1e+308) cannot be computed: head 1: values in scores overflow'),
    ("mla_learns", "lr = 1.0", 'step 1 of 6 (lr = 1e+308) cannot be computed: head 1: values in scores overflow'),
    # the step's Q rows are past float64 when squared for their length: named as the other overflows are
    ("deltanet_learns", "lr = 0.5", "step 1 of 8 (lr = 1e+308) cannot be computed: head 1: values in Σq² of [deltanet]"
                                    " overflow"),
])
def test_an_lr_past_float64_stops_the_json_train_list_and_check_still_says_ok(tmp_path, name: str, old: str,
                                                                               says: str) -> None:
    """--check said ok and --export json refused the file with the first step's overflow, as if the file's own
    scores overflowed: the file computes; its first step does not."""
    text = (builtin_dir() / f"{name}.toml").read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace(old, "lr = 1e308"), encoding="utf-8")
    assert run("--check", str(path))[0] == 0
    code, out, err = run("--export", "json", str(path))
    assert code == 0 and err == "", err
    train = json.loads(out)["train"]
    assert len(train) == 2 and train[1]["stopped"].startswith(says), train[1]
