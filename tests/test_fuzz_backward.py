"""Generated [mla], [linear] and [deltanet] scenarios with a [backward] table in each of its forms, through every
path a user reaches (tests/fuzz_backward_paths.py): the backward stages exact and by hand, the Train view, the
grad JSON, the worksheet, the gradients against the forward pass; beside [deltanet]'s conv/W_Z keys, one line.
The same draws on every run (the project's hypothesis profile, tests/conftest.py), a bounded count of each."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .fuzz_backward_paths import assert_backward_paths
from .fuzz_paths import assert_refused
from .strategies_backward import TABLES, backward_scenarios
from .test_fuzz_latent_state_tables_app import survives_the_app

# an overflow the code does not expect shows as a NumPy warning before it shows as a wrong number
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")
# each example runs every path (about 2 s of CPU): 3 of each table and 2 extreme keep the file near 40 s
FUZZ = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EXTREME = settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("table", sorted(TABLES))
def test_generated_backward_scenarios_pass_every_path(table: str) -> None:
    @FUZZ
    @given(backward_scenarios(table), st.integers(1, 6))
    def check(text: str, decimals: int) -> None:
        assert_backward_paths(text, decimals)

    check()


@pytest.mark.parametrize("table", sorted(TABLES))
def test_extreme_backward_scenarios_are_computed_or_refused_in_one_line(table: str) -> None:
    @EXTREME
    @given(backward_scenarios(table, extreme=True))
    def check(text: str) -> None:
        assert_backward_paths(text, gradients_true=False)

    check()


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(backward_scenarios("deltanet", io=True))
def test_backward_beside_the_short_convolution_or_output_norm_is_one_line(text: str) -> None:
    assert assert_refused(text).count("error:") == 1


def test_a_generated_backward_scenario_survives_the_app() -> None:
    """Opened in the app, every stage (the backward ones too), the key storm with the Train view (l) and h in it;
    one draw of the three tables (a storm costs a minute of this machine: the forward storms are in
    tests/test_fuzz_latent_state_tables_app.py)."""
    survives_the_app(st.one_of(*(backward_scenarios(table) for table in sorted(TABLES))))
