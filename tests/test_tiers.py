"""tests/conftest.py's tiers: a test is app, snapshot or slow by what its code reaches, however indirectly,
so that `pytest -m "not app and not slow and not snapshot"` stays quick as tests are added."""

from __future__ import annotations

from . import (
    test_bursts,
    test_cli,
    test_decode,
    test_errors,
    test_fuzz_backward,
    test_shared_css,
    test_worksheet_backward_variants,
)
from .conftest import tiers_of


def test_pilot_in_the_test_is_app() -> None:
    assert tiers_of([test_bursts.test_quit_wins_a_burst], None, ["tmp_path"], "test_bursts.py::x") == ["app"]


def test_pilot_in_a_helper_of_another_test_module_is_app() -> None:
    """survives_the_app (tests/test_fuzz_latent_state_tables_app.py) runs the app inside asyncio.run."""
    test = test_fuzz_backward.test_a_generated_backward_scenario_survives_the_app
    assert "app" in tiers_of([test], None, [], "test_fuzz_backward.py::x")


def test_a_package_function_that_drives_the_app_is_app() -> None:
    test = test_shared_css.test_an_app_after_the_first_parses_and_matches_nothing  # serve.zygote.first_frame
    assert tiers_of([test], None, [], "test_shared_css.py::x") == ["app"]


def test_auto_pilot_is_app() -> None:
    assert tiers_of([test_cli.test_app_normal_exit_is_zero], None, [], "test_cli.py::x") == ["app"]


def test_snap_compare_is_snapshot_and_app() -> None:
    assert tiers_of([test_errors.test_missing_file], None, ["cli", "snap_compare"], "test_errors.py::x") == ["snapshot", "app"]


def test_torch_imported_inside_the_test_is_slow() -> None:
    test = test_decode.test_each_step_is_torchs_attention_with_causal_lower_right
    assert tiers_of([test], None, [], "test_decode.py::x") == ["slow"]


def test_a_pdf_read_back_in_a_helper_is_slow() -> None:
    test = test_worksheet_backward_variants.test_the_pdf_prints_the_backward_key_on_the_key_pages_only
    assert tiers_of([test], None, [], "test_worksheet_backward_variants.py::x") == ["slow"]


def test_a_measured_test_is_slow_with_every_parameter() -> None:
    test = test_fuzz_backward.test_generated_backward_scenarios_pass_every_path  # listed as "…pass_every_path["
    assert tiers_of([test], None, [], "test_fuzz_backward.py::test_generated_backward_scenarios_pass_every_path[mla]") \
        == ["slow"]


def test_a_plain_test_is_in_no_tier() -> None:
    assert tiers_of([test_errors.test_missing_file], None, ["cli"], "test_errors.py::test_missing_file") == []
