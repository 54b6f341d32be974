"""Generated [mla], [linear] and [deltanet] scenarios through every path a user reaches (tests/fuzz_paths.py):
the same draws on every run (the project's hypothesis profile, tests/conftest.py), a bounded count of each."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .fuzz_paths import assert_every_path
from .strategies_latent_state import deltanet_scenarios, linear_scenarios, mla_scenarios

# an overflow the code does not expect shows as a NumPy warning before it shows as a wrong number
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")
FUZZ = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TABLES = {"mla": mla_scenarios, "linear": linear_scenarios, "deltanet": deltanet_scenarios}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_generated_scenarios_pass_every_path(table: str) -> None:
    @FUZZ
    @given(TABLES[table](), st.integers(1, 8))
    def check(text: str, decimals: int) -> None:
        assert_every_path(text, decimals)

    check()


@pytest.mark.parametrize("table", sorted(TABLES))
def test_extreme_scenarios_are_computed_or_refused_in_one_line(table: str) -> None:
    @FUZZ
    @given(TABLES[table](extreme=True))
    def check(text: str) -> None:
        assert_every_path(text)

    check()
