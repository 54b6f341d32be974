"""Over random shapes, heads and masks: a learner's solution with one known mistake (tests/learner_impl.py)
is either indistinguishable from the right one there (and --compare says everything agrees, exit 0) or
differs, and then --compare exits 1 and its diagnosis names that mistake."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from qkv_tui.edges.cli import main
from tests.learner_impl import Case, run, save

BUGS = {"no_scale": "no_scale", "scale_d_model": "scale_d_model", "scale_d_k": "scale_d_k",
        "softmax_axis": "softmax_axis", "mask_after_softmax": "mask_after_softmax",
        "mask_fill_zero": "mask_fill_zero", "causal_off_by_one": "causal_off_by_one",
        "k_not_transposed": "k_not_transposed", "head_order": "head_order", "rope_layout": "rope_layout",
        "transposed_W_Q": "weight_transposed", "transposed_W_V": "weight_transposed",
        "transposed_W_O": "weight_transposed", "k_v_swapped": "k_v_swapped", "softmax_overflow": "softmax_overflow"}


def _differs(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return any(x.shape != y.shape or not np.allclose(x, y, rtol=1e-4, atol=1e-6) for x, y in
               ((a[k], b[k]) for k in a))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 5), heads=st.integers(1, 3), d_k=st.sampled_from([2, 4]), square=st.booleans(),
       causal=st.booleans(), rope=st.booleans(), W_O=st.booleans(), seed=st.integers(0, 2**16),
       bug=st.sampled_from(sorted(BUGS)))
def test_one_mistake_is_named_wherever_it_shows(n: int, heads: int, d_k: int, square: bool, causal: bool,
                                                 rope: bool, W_O: bool, seed: int, bug: str) -> None:
    d_model = heads * d_k if square else heads * d_k + 1
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d_model))
    W = [rng.normal(size=(heads * d_k, d_model)) / np.sqrt(d_model) for _ in range(3)]
    out_w = rng.normal(size=(d_model, heads * d_k)) if W_O else None
    case = Case(X, W[0], W[1], W[2], out_w, heads, causal=causal, rope_theta=10000.0 if rope else None,
                bugs=frozenset({bug}))
    right = Case(**{**case.__dict__, "bugs": frozenset()})
    try:
        wrong = run(case)
    except ValueError:  # the mistake's shapes do not fit here (K not transposed, a non-square weight)
        assume(False)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "mine.npz"
        save(case, str(path))
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            status = main(["--tensors", str(path), "--layout", "torch", "--compare", str(path), "--export", "json"])
    report = json.loads(out.getvalue())["compare"]
    if _differs(wrong, run(right)):
        assert status == 1
        assert BUGS[bug] in report["diagnosis"], (bug, report)
    else:
        assert status == 0 and report["agree"] and report["diagnosis"] == []
