"""Generated [differential], [indexer], [ssd], per-channel [deltanet], [value_scale] and [v_norm] scenarios
through every path a user reaches (tests/fuzz_paths.py): the same draws on every run (the project's
hypothesis profile, tests/conftest.py), a bounded count of each."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .fuzz_paths import assert_every_path
from .strategies_parts_2026 import PARTS

# an overflow the code does not expect shows as a NumPy warning before it shows as a wrong number
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")
# the worksheet refuses, in one line, what it does not print yet (docs/scenario-format.md, each table's section)
WORKSHEET_REFUSES = frozenset({"worksheet"})
# QKV_FUZZ_EXAMPLES=200 fuzzes deeper by hand; CI runs the default
FUZZ = settings(max_examples=int(os.environ.get("QKV_FUZZ_EXAMPLES", "8")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("part", sorted(PARTS))
def test_generated_scenarios_pass_every_path(part: str) -> None:
    accepted: list[bool] = []

    @FUZZ
    @given(PARTS[part](), st.integers(1, 8))
    def check(text: str, decimals: int) -> None:
        accepted.append(assert_every_path(text, decimals, WORKSHEET_REFUSES))

    check()
    assert any(accepted), f"every generated {part} scenario was refused: the strategy draws nothing the app runs"


@pytest.mark.parametrize("part", sorted(PARTS))
def test_extreme_scenarios_are_computed_or_refused_in_one_line(part: str) -> None:
    @FUZZ
    @given(PARTS[part](extreme=True))
    def check(text: str) -> None:
        assert_every_path(text, may_refuse=WORKSHEET_REFUSES)

    check()
