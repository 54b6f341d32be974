"""The crashes the fuzzing of [mla], [linear] and [deltanet] found (tests/test_fuzz_latent_state_tables.py), each kept
as the generated example that showed it, run through every path (tests/fuzz_paths.py)."""

from __future__ import annotations

import pytest

from qkv_tui.core.scenario import builtin_dir

from .fuzz_paths import assert_every_path, assert_refused

# an overflow the code does not expect shows as a NumPy warning before it shows as a wrong number
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

FOUND = {
    # g given beside W_b: the engine asserted A_log was there (AssertionError from --check and every export)
    "g_given_beta_from_W_b": ('tokens = ["t0"]\nX = [[0, 0]]\nmask = "causal"\n[attention]\nnum_heads = 1\n'
                              'W_Q = [[0, 0], [0, 0]]\nW_K = [[0, 0], [0, 0]]\nW_V = [[0], [0]]\n[deltanet]\ng = [[0]]\n'
                              'W_b = [[0], [0]]\n', 3),
    # q = 0: its root √(0 + 1e-6) = 0.001 is 0.0 at 1 decimal; by hand 0/0 (a NumPy warning), and the
    # Normalise line's calculator check divided by the shown 0.0 (ZeroDivisionError in the markdown and the app)
    "zero_query_at_one_decimal": ('tokens = ["t0"]\nX = [[0]]\nmask = "causal"\n[[heads]]\nname = "h0"\nW_Q = [[0]]\n'
                                  'W_K = [[0]]\nW_V = [[0]]\n[deltanet]\nW_a = [[0]]\nA_log = [0]\ndt_bias = [0]\n'
                                  'W_b = [[0]]\n', 1),
    "zero_query_with_a_bias": ('tokens = ["t0"]\nX = [[0, 0, 0, 0]]\nmask = "causal"\n[[heads]]\nname = "h0"\n'
                               'W_Q = [[0], [0], [0], [0]]\nW_K = [[0], [0], [0], [0]]\n'
                               'W_V = [[0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]\nb_Q = [1]\n[deltanet]\ng = [[0]]\n'
                               'W_b = [[0], [0], [0], [0]]\n', 1),
    # without a softmax a kept weight may be below a masked 0: the closing summary's "where each token
    # looks" took the masked column as the top and found no kept key there (IndexError in the app and markdown)
    "identity_features_negative_weights": (
        'tokens = ["t0", "t1", "t2"]\nX = [[0, 0, 2, 3], [2, 2, 0, -3], [0, 0, 0, 0]]\nmask = "causal"\n[norm]\n'
        'kind = "layer"\ngamma = [0, 1, 1, 0]\n[qk_norm]\nover = "head"\ngamma_q = [0, 0, 0.8]\n[attention]\n'
        'num_heads = 1\nW_Q = [[-3, 0, -3], [-2, -1, 0], [1, 0, -3], [0, 0, 0]]\nW_K = [[0, 1, 3], [-1, 0, -1], [0, 0, 2],'
        ' [0, 0, 0]]\nW_V = [[0], [0], [0], [0]]\n[gate]\nW_G = [[0], [0], [0], [0]]\n[linear]\nfeature = "identity"\n'
        'normalize = false\n', 1),
    "deltanet_negative_weights": (
        'tokens = ["t0", "t1"]\nX = [[-0.29, 1.43], [1, 0]]\nmask = "causal"\n[norm]\nkind = "rms"\n[qk_norm]\n'
        'over = "head"\ngamma_q = [1.5, -2]\n[attention]\nnum_heads = 1\nW_Q = [[-1.97, 0.0], [-0.0, 1]]\n'
        'W_K = [[2, 3], [-2.0, 1.91]]\nW_V = [[-0.0, -2, 0.11], [0, -0.0, 2]]\nb_V = [1.19, -2, 0.0]\n[gate]\n'
        'W_G = [[3, 0.0, 0.04], [-1, 3, 0.3]]\n[deltanet]\ng = [[0], [0]]\nbeta = [[0], [1.73]]\n[output]\n'
        'W_O = [[-3, 1.72, 0.0], [0.6, -0.0, -1.18], [0.0, -0.0, 1.85]]\n', 5),
}


@pytest.mark.parametrize("case", sorted(FOUND))
def test_what_fuzzing_found_now_passes_every_path(case: str) -> None:
    text, decimals = FOUND[case]
    assert assert_every_path(text, decimals) is True


def test_gate_logits_past_float64_are_refused_by_check_as_by_every_export() -> None:
    """--check said ok, and --export markdown stopped at the overflow of X̂·W_b worked term by term."""
    text = (builtin_dir() / "deltanet.toml").read_text(encoding="utf-8")
    text = text.replace("beta = [[1.0], [0.5], [0.5]]", "W_b = [[1e308], [1e308], [0], [1]]")
    line = assert_refused(text, (("--export", "markdown"), ("--export", "json"), ("--export", "worksheet")))
    assert line.endswith("values in [deltanet]'s X̂·W_b overflow float64 at row 3 (\"AI\"); expected smaller X or W_b")
    wa = (builtin_dir() / "deltanet.toml").read_text(encoding="utf-8").replace(
        "g = [[-0.5], [-0.5], [-0.5]]", "W_a = [[1e308], [1e308], [0], [1]]\nA_log = [0]\ndt_bias = [0]")
    assert "values in [deltanet]'s X̂·W_a + dt_bias overflow float64 at row 3" in assert_refused(wa)


def test_a_norm_root_that_rounds_to_zero_by_hand_is_kept_unrounded() -> None:
    """A LayerNorm row of nearly equal numbers: √(var + eps) ≈ 0.003 is 0.0 at one decimal. The forward pass
    already divided by the unrounded root; the root it kept was the rounded 0, so dNorm by hand divided by 0."""
    from qkv_tui import compute
    from qkv_tui.core.scenario import parse_scenario
    from qkv_tui.teach.handcalc import compute_hand
    from qkv_tui.teach.trace import Trace

    from .test_backward_lines import backward_text
    from .test_calculator import assert_holds, check_text

    text = (
        'tokens = ["a", "b"]\nX = [[1.0, 1.02, 0.98, 1.0], [0, 1, 0, 1]]\n'
        '[norm]\nkind = "layer"\ngamma = [1, 1, 1, 1]\nbeta = [0, 0, 0, 0]\n'
        "[attention]\nnum_heads = 1\nW_Q = [[1,0],[0,1],[1,0],[0,1]]\nW_K = [[1,0],[0,1],[1,0],[0,1]]\n"
        "W_V = [[1,0],[0,1],[1,0],[0,1]]\n[backward]\ntarget = [[0,0],[1,1]]\n"
    )
    for decimals in (1, 2):
        comp = compute_hand(compute(parse_scenario(text, "tiny_var.toml")), decimals)
        assert comp.norm is not None and bool((comp.norm.root > 0).all())
        trace = Trace(comp)
        lines = backward_text(trace, decimals)
        assert "nan" not in lines and "inf" not in lines
        assert_holds(check_text(lines, whole=False))
