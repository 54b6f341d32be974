"""YaRN's words against numbers computed here, independently of the app (the issue found "pairs up to 0 turn more
than beta_fast 32 times in the original 8 positions" where pair 0 turned 1.27 times).

Pair i turns L·θᵢ/2π times over the original context L; transformers' find_correction_range puts the ramp between
the pairs that turn beta_fast and beta_slow times, d·ln(L/(2π·β))/(2·ln base), rounded outward and clamped to
[0, d − 1]. Under partial rotary only the turned dimensions carry a² (apply_rotary_pos_emb's q_pass is untouched).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import builtin_dir, load_scenario, parse_scenario
from qkv_tui.kernels.rope import Rotated
from qkv_tui.teach.trace import Trace

BUILTIN = (builtin_dir() / "rope_scaling.toml").read_text(encoding="utf-8")


def variant(base: float, L: int, positions: str = "[0, 8, 16]") -> str:
    """rope_scaling.toml with another base, original context and positions."""
    text = re.sub(r"^base = [0-9.]+", f"base = {base}", BUILTIN, count=1, flags=re.M)
    text = re.sub(r"^positions = \[[^]]*\]", f"positions = {positions}", text, count=1, flags=re.M)
    return re.sub(r"^original_max_position_embeddings = \d+", f"original_max_position_embeddings = {L}", text,
                  count=1, flags=re.M)


def lines_of(text: str, partial: float | None = None) -> dict[str, tuple[str, ...]]:
    """Every Rotate cell's explanation, by its arithmetic's left side: ``{"Q'[love,0]": (line, *details)}``."""
    if partial is not None:
        text = text.replace('layout = "interleaved"', f'layout = "interleaved"\npartial = {partial}')
    trace = Trace(compute(parse_scenario(text, "yarn.toml")))
    out = {}
    for i in range(len(trace)):
        op = trace._build(i)
        if op.segment.target in ("Q_rot", "K_rot"):
            out[op.arithmetic.partition(" = ")[0]] = (op.arithmetic, *op.details)
    return out


def yarn_line(lines: dict[str, tuple[str, ...]], cell: str) -> str:
    return next(line for line in lines[cell] if line.startswith("yarn scaling:"))


def quoted(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found is not None, f"{pattern!r} not in {text!r}"
    return float(found.group(1))


def turns(L: float, base: float, i: int, d: int) -> float:
    return float(L * base ** (-2 * i / d) / (2 * math.pi))


def correction_dim(beta: float, L: float, base: float, d: int) -> float:
    return d * math.log(L / (2 * math.pi * beta)) / (2 * math.log(base))


@pytest.mark.parametrize(("base", "L"), [(10000.0, 256), (100.0, 8), (10.0, 400), (500.0, 64)])
def test_the_turns_and_the_ramp_quoted_are_the_scenarios_own(base: float, L: int) -> None:
    lines = lines_of(variant(base, L))
    for i, cell in enumerate(("Q'[love,0]", "Q'[love,2]")):  # pair 0, pair 1 (interleaved)
        said = yarn_line(lines, cell)
        got = quoted(rf"pair {i} turns L·θ{'₀₁'[i]}/2π = [^=]+ = ([0-9.]+) times in the original {L} positions", said)
        assert got == pytest.approx(turns(L, base, i, 4), abs=0.0006 * max(1.0, got))
        fast = quoted(r"= (-?[0-9.]+) for beta_fast", said)
        slow = quoted(r"= (-?[0-9.]+) for beta_slow", said)
        assert fast == pytest.approx(correction_dim(32, L, base, 4), abs=0.0006)
        assert slow == pytest.approx(correction_dim(1, L, base, 4), abs=0.0006)
        t = turns(L, base, i, 4)
        if "it keeps θ (w = 1)" in said and "yet" not in said:
            assert t > 32
        if "θ is divided (w = 0)" in said:
            assert t < 1


def test_the_builtin_is_in_yarns_regime_and_says_so() -> None:
    """Base 10000 over 256 positions: pair 0 turns 40.7 times (kept), pair 1 0.41 times (divided); no clamp."""
    lines = lines_of(BUILTIN)
    zero, one = yarn_line(lines, "Q'[love,0]"), yarn_line(lines, "Q'[love,2]")
    assert "= 40.744 times in the original 256 positions, more than beta_fast = 32" in zero
    assert "more than beta_fast = 32: before the ramp, it keeps θ (w = 1)" in zero
    assert "= 0.4074 times in the original 256 positions, fewer than beta_slow = 1" in one
    assert "clamped" not in zero + one
    comp = compute(load_scenario("rope_scaling"))
    rope = comp.scenario.rope
    assert rope is not None
    assert list(rope.inv_freq(4)) == [1.0, 0.01 / 4]


def test_a_start_before_pair_0_is_said_to_be_clamped() -> None:
    """The old numbers (base 100, L = 8): pair 0 turns 1.27 times, fewer than 32, and keeps θ only by the clamp."""
    said = yarn_line(lines_of(variant(100.0, 8)), "Q'[love,0]")
    assert "= 1.273 times in the original 8 positions, fewer than beta_fast = 32, yet it keeps θ (w = 1)" in said
    assert f"= {correction_dim(32, 8, 100.0, 4):.3f} for beta_fast" in said  # -1.400
    assert "rounded outward to -2 and 1" in said
    assert "a start before pair 0 is clamped to 0 (transformers' find_correction_range)" in said
    assert "more than beta_fast" not in said


def test_an_end_past_the_last_pair_is_said_and_the_blend_is_worked() -> None:
    """Base 10 over 400 positions: beta_slow's pair is 3.61, rounded to 4 and clamped to r − 1 = 3; pair 1 sits
    on the ramp, w = 1 − (1 − 0)/(3 − 0)."""
    assert correction_dim(1, 400, 10.0, 4) == pytest.approx(3.6078, abs=1e-4)
    said = yarn_line(lines_of(variant(10.0, 400)), "Q'[love,2]")
    assert "the end is clamped to r − 1 = 3, a count of dimensions, past the last pair (1)" in said
    assert "on the ramp, w = 1 − ramp₁ = 1 − (1 − 0) / (3 − 0) = 0.667" in said
    rope = compute(parse_scenario(variant(10.0, 400), "y.toml")).scenario.rope
    assert rope is not None and float(rope.kept(4)[1]) == pytest.approx(1 - 1 / 3)


def test_under_partial_rotary_only_the_turned_part_carries_a_squared() -> None:
    text = variant(10000.0, 256, "[0, 256, 512]")
    factor_line = next(line for line in lines_of(text, 0.5)["Q'[love,0]"] if line.startswith("a = "))
    assert "only the turned dims' part of each score (dims 0 to 1; dims 2 and 3 pass as they are) carries a²" \
        in factor_line
    assert "so each score carries a²" in next(line for line in lines_of(text)["Q'[love,0]"] if line.startswith("a = "))

    def parts(attention_factor: float) -> tuple[np.ndarray, np.ndarray]:
        t = text.replace('layout = "interleaved"', 'layout = "interleaved"\npartial = 0.5').replace(
            "original_max_position_embeddings = 256", f"original_max_position_embeddings = 256\n"
                                                      f"attention_factor = {attention_factor}")
        head = compute(parse_scenario(t, "p.toml")).heads[0]
        rot = head.need(Rotated)
        return rot.Q_rot[:, :2] @ rot.K_rot[:, :2].T, rot.Q_rot[:, 2:] @ rot.K_rot[:, 2:].T

    a = 0.1 * math.log(4) + 1
    (turned_a, passed_a), (turned_1, passed_1) = parts(a), parts(1.0)
    assert np.allclose(turned_a, a * a * turned_1) and np.array_equal(passed_a, passed_1)


# an attention factor whose square is past float64's range, with inputs small enough that every score is in range
HUGE_FACTOR = BUILTIN.replace("original_max_position_embeddings = 256",
                              "original_max_position_embeddings = 256\nattention_factor = 1e200").replace(
    "[1, 0, 1, 0],   # I", "[1e-200, 0, 1e-200, 0],").replace("[0, 1, 0, 1],   # love", "[0, 1e-200, 0, 1e-200],") \
    .replace("[1, 1, 0, 0],   # AI", "[1e-200, 1e-200, 0, 0],")


def test_an_attention_factor_whose_square_overflows(cli: Callable[..., object], tmp_path: Path) -> None:
    assert "1e-200" in HUGE_FACTOR and "attention_factor = 1e200" in HUGE_FACTOR
    lines = lines_of(HUGE_FACTOR)
    factor_line = next(line for line in lines["Q'[love,0]"] if line.startswith("a = "))
    assert factor_line.endswith("a² = 1.000e+200², past float64's range")
    path = tmp_path / "huge_factor.toml"
    path.write_text(HUGE_FACTOR, encoding="utf-8")
    checked = cli("--check", str(path))
    assert checked.code == 0  # type: ignore[attr-defined]
    page = cli(str(path), "--export", "markdown")
    assert page.code == 0, page.err  # type: ignore[attr-defined]
    assert "a² = 1.000e+200², past float64's range" in page.out  # type: ignore[attr-defined]


async def test_the_app_shows_the_rotate_stage_of_a_huge_factor(tmp_path: Path) -> None:
    from qkv_tui.ui.app import QKVApp

    path = tmp_path / "huge_factor.toml"
    path.write_text(HUGE_FACTOR, encoding="utf-8")
    app = QKVApp(str(path))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3", "right", "right", "right", "4", "right")
        await pilot.pause()
    assert app.return_code in (None, 0)


def test_the_description_quotes_the_scenarios_numbers() -> None:
    sc = load_scenario("rope_scaling")
    text = " ".join(sc.description.split())
    rope = sc.rope
    assert rope is not None and rope.scaling is not None and sc.positions == (0, 256, 512)
    L = float(rope.scaling.original_max_position_embeddings or 0)
    assert f"pair 0 (θ₀ = 1) turns 256/2π = {turns(L, rope.base, 0, 4):.1f} times" in text
    assert f"pair 1 (θ₁ = 10000^(−1/2) = 0.01) turns {turns(L, rope.base, 1, 4):.2f} times" in text
    assert f"θ'₁ = 0.01 / 4 = {rope.inv_freq(4)[1]:g}: at position 512 it turns {512 * rope.inv_freq(4)[1]:.2f}" in text
    assert f"as far as position {512 * rope.inv_freq(4)[1] / rope.base ** -0.5:.0f} did unscaled" in text
    a = 0.1 * math.log(4) + 1
    assert f"a = 0.1·ln(4) + 1 = {a:.3f}" in text and f"a² = {a * a:.3f}" in text
    scores = compute(sc).heads[0].scores
    assert "the diagonal reads " + ", ".join(f"{x:.3f}" for x in np.diag(scores)) in text
    assert "with YaRN " + ", ".join(f"{x:.3f}" for x in scores[1]) in text
    plain = re.sub(r"\n\[rope\.scaling\].*?(?=\n\[\[heads\]\])", "", BUILTIN, flags=re.S)
    unscaled = compute(parse_scenario(plain, "plain.toml")).heads[0].scores
    assert "love's scores are " + ", ".join(f"{x:.3f}".rstrip("0").rstrip(".") if x == round(x) else f"{x:.3f}"
                                            for x in unscaled[1]) in text
