"""Every export accepts what ``--check`` accepts: when --check says ok, ``--export json``, ``markdown`` and
``toml`` each exit 0 with their document; when --check refuses, every export refuses with its line.

The generated scenarios are the suite's own (tests/strategies*.py, tests/variants_cases.py) with one or two
of their numbers swapped for a value at float64's edges, where an export's own arithmetic (a line's operands
as shown, a soft-cap's s/c, the gradients) used to fail after --check had computed the scenario.

The worksheet is left out of the property: it works from rounded values, and some files --check accepts
still overflow there (a [deltanet] [backward] with W_b = 1e200, say); that is the worksheet's own item.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkv_tui.teach.arith import dot_at

from .fuzz_paths import one_error_line, run
from .strategies import cases
from .strategies_backward import _grid, _io_lines, _shape, _with_io, backward_scenarios
from .strategies_latent_state import EXTREME, deltanet_scenarios, new_table_scenarios
from .variants_cases import modern_cases, toml_value

# keys whose values are real numbers: a value at float64's edges there is valid TOML and a fair scenario
REAL_KEYS = re.compile(r"^(X|W_\w+|b_[QKVO]|gamma\w*|beta|sinks?|target|dO|g|A_log|dt_bias|conv_[qkv]|softcap|scale"
                       r"|slopes|eps\w*|lr) = ", re.M)
NUMBER = re.compile(r"(?<![\w.])-?\d+(\.\d+)?(e[-+]?\d+)?(?![\w.])")
EDGES = st.one_of(EXTREME, st.sampled_from([1.7976931348623157e308, -1.7976931348623157e308, 1e50, 1e100]))


@st.composite
def _one_edge(draw: st.DrawFn, text: str) -> str:
    """``text`` with one or two of its real numbers replaced by a value at float64's edges."""
    spots = [(line.start(), m) for line in REAL_KEYS.finditer(text)
             for m in NUMBER.finditer(text, line.end(), text.find("\n", line.end()) if "\n" in text[line.end():]
                                      else len(text))]
    if not spots:
        return text
    chosen = sorted(draw(st.lists(st.sampled_from(range(len(spots))), min_size=1, max_size=2, unique=True)),
                    reverse=True)
    for i in chosen:
        m = spots[i][1]
        text = text[:m.start()] + repr(draw(EDGES)) + text[m.end():]
    return text


def _with_softcap(draw: st.DrawFn, text: str) -> str:
    at = text.find("\n[") + 1 or len(text)
    cap = draw(st.sampled_from([5e-324, 1e-300, 0.5, 50.0, 1e308]))
    return text[:at] + f"softcap = {cap!r}\n" + text[at:]


def _with_backward(draw: st.DrawFn, text: str) -> str:
    shape = _shape(text)
    n, d_out = shape if shape is not None else (1, 1)
    key = draw(st.sampled_from(["target", "dO"]))
    lines = ["[backward]", f"{key} = {toml_value(_grid(draw, n, d_out, False))}"]
    if key == "target" and draw(st.booleans()):
        lines.append(f"steps = {draw(st.integers(0, 2))}")
    return text + "\n".join(lines) + "\n"


@st.composite
def _plain(draw: st.DrawFn) -> str:
    text = draw(cases()).toml
    return _with_softcap(draw, text) if draw(st.booleans()) else text


@st.composite
def _modern(draw: st.DrawFn) -> str:
    text = draw(modern_cases()).toml
    if draw(st.booleans()):
        text = _with_softcap(draw, text)
    return _with_backward(draw, text) if draw(st.booleans()) else text


@st.composite
def _deltanet_io(draw: st.DrawFn) -> str:
    text = draw(deltanet_scenarios())
    return _with_io(text, _io_lines(draw, text, False))


FAMILIES: dict[str, Any] = {
    "plain": _plain(),
    "modern": _modern(),
    "new_tables": new_table_scenarios(),
    "deltanet_io": _deltanet_io(),
    "backward": st.sampled_from(["mla", "linear", "deltanet"]).flatmap(backward_scenarios),
}
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
EXPORTS = ("json", "markdown", "toml")


def _strict_json(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def assert_exports_accept_what_check_accepts(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "edge.toml"
        path.write_text(text, encoding="utf-8")
        code, out, err = run("--check", str(path))
        if code != 0:
            line = one_error_line(code, out, err, path)
            for fmt in (*EXPORTS, "worksheet"):
                assert one_error_line(*run("--export", fmt, str(path)), path) == line, fmt
            return
        assert out.startswith("ok: "), (code, err)
        for fmt in EXPORTS:
            code, out, err = run("--export", fmt, str(path))
            assert code == 0 and out and "Traceback" not in err, (fmt, err)
            if fmt == "json":
                _strict_json(out)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_export_accepts_what_check_accepts(family: str) -> None:
    @FUZZ
    @given(FAMILIES[family].flatmap(_one_edge))
    def check(text: str) -> None:
        assert_exports_accept_what_check_accepts(text)

    check()


# --- the cases the fuzzer found, each a test of its own ---------------------------------------------------

SEED = (Path(__file__).resolve().parent.parent / "scenarios").joinpath


def test_a_subnormal_soft_cap_is_computed_by_every_export() -> None:
    # s/c overflows to ∞ and tanh(∞) is the 1 it stands for: the Markdown's decode steps used to raise
    text = re.sub(r"(?m)^softcap = .*$", "softcap = 5e-324", SEED("softcap.toml").read_text(encoding="utf-8"))
    assert_exports_accept_what_check_accepts(text)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cap.toml"
        path.write_text(text, encoding="utf-8")
        code, out, _ = run("--export", "markdown", str(path))
        assert code == 0 and "5e-324·tanh(∞)" in out


def _deltanet_with_conv(first_tap: str, taps: int) -> str:
    rows = "[" + ", ".join([f"[{first_tap}, {first_tap}]"] + ["[0.5, 0.5]"] * (taps - 1)) + "]"
    text = SEED("deltanet.toml").read_text(encoding="utf-8")
    return text.replace("beta = [[1.0], [0.5], [0.5]]", "beta = [[1.0], [0.5], [0.5]]\n"
                        + "".join(f"conv_{c} = {rows}\n" for c in "qkv"))


def test_a_convolution_tap_at_float64s_largest_is_computed_by_the_markdown() -> None:
    # the oldest of 17 taps multiplies the zeros before the first token; shown at 3 digits it reads 1.80e308,
    # past float64, and ∞·0 made the long sum's check raise (teach/arith.py, dot_at)
    assert_exports_accept_what_check_accepts(_deltanet_with_conv("1.7976931348623157e308", 17))


def test_gradients_past_float64_are_refused_by_check_with_the_exports_line() -> None:
    text = re.sub(r"(?m)^  \[1, 0, 1\],( +# I: its own Value)", r"  [1e200, 0, 1],\1",
                  SEED("learn_to_look.toml").read_text(encoding="utf-8"))
    assert "[1e200, 0, 1]" in text
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "loss.toml"
        path.write_text(text, encoding="utf-8")
        line = one_error_line(*run("--check", str(path)), path)
    assert "too large or too small to compute with float64" in line
    assert_exports_accept_what_check_accepts(text)


@pytest.mark.parametrize("terms", [
    ([1.7976931348623157e308] + [0.5] * 16, [0.0] * 17),  # long: ∞·0 as shown
    ([1.7976931348623157e308, -1.7976931348623157e308], [1.0, 1.0]),  # short: ∞ − ∞ as shown
])
def test_a_dot_product_whose_shown_operands_pass_float64_gives_what_float64_gives(terms: tuple[list[float], list[float]]) -> None:
    a, b = terms
    with np.errstate(all="raise"):
        _, total, _ = dot_at(a, b, False, False, 3, None)
    assert math.isnan(total) or math.isfinite(total)


def test_a_value_at_float64s_largest_is_worked_by_the_flash_attention_section() -> None:
    # V = 1.7976931348623157e308 reads as 1.80e308, past float64, at 3 places: the tiled rows' P·V gave 0·∞
    # (teach/tiled.py), and a calculator-line sum gave ∞ − ∞ (fsum's ValueError); both now ask for more places
    text = ('tokens = ["t0", "t1"]\nX = [[1], [-1]]\n[[heads]]\nname = "h0"\nW_Q = [[0, 0]]\nW_K = [[0, 0]]\n'
            "W_V = [[1.7976931348623157e+308]]\n")
    assert_exports_accept_what_check_accepts(text)
    assert_exports_accept_what_check_accepts(text.replace("[[heads]]", "softcap = 5e-324\n[[heads]]"))


def test_the_vector_form_of_mix_with_values_shown_past_float64_does_not_check_out_rather_than_raise() -> None:
    # 0.500·[1.80e308] + 0.500·[−1.80e308] as shown is ∞ − ∞: fsum's ValueError before; now NaN, which is no result
    from qkv_tui.teach.arith import vector_mix

    top = 1.7976931348623157e308
    assert vector_mix([0.5, 0.5], np.array([[top], [-top]]), False, ["0.000"], 3, None) == ""
