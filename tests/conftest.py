"""Shared helpers: the shipped scenarios, and running the command line in-process."""

from __future__ import annotations

import functools
import inspect
import os
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.blas_pin import pin_kernels

pin_kernels()  # before anything below loads NumPy

import pytest  # noqa: E402  (after the pin: nothing may load NumPy before it)
from hypothesis import settings  # noqa: E402

from qkv_tui.edges.cli import main  # noqa: E402

# The suite gates every landing: the same generated examples on every run, so a red run means a
# change broke something, never that a new random draw found an old bug. To hunt for new cases,
# run with QKV_HYPOTHESIS=explore (random draws; what fails is printed to be kept as a test).
settings.register_profile("fixed", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, print_blob=True)
settings.load_profile(os.environ.get("QKV_HYPOTHESIS", "fixed"))

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "scenarios").glob("*.toml"))
# hand-made scenarios; those with a [model] table (a real model's head, d_model 128) have their own tests
SCENARIOS = [p for p in SHIPPED if "\n[model]" not in p.read_text(encoding="utf-8")]
MODEL_SCENARIOS = [p for p in SHIPPED if p not in SCENARIOS]
# those whose heads run a softmax: [linear] and [deltanet] keep a state instead, with no KV cache and no tiles
# the scenarios whose heads take one softmax map (what the cache, tiles and worksheet pages work through);
# [differential]'s heads subtract two, [indexer]'s attend a selection those views do not make, [ssd]'s keep a
# state, and [shared_kv]'s K and V are another layer's, which the cache and the worksheet do not hold: they refuse
# them in one line
SOFTMAX_SCENARIOS = [p for p in SCENARIOS
                     if not re.search(r"^\[(linear|deltanet|differential|indexer|ssd|shared_kv)\]",
                                      p.read_text(encoding="utf-8"), re.M)]
BASE = '''
tokens = ["I", "love", "AI"]
X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
'''
HEAD = '''
[[heads]]
W_Q = [[1, 0, 1], [0, 1, 0], [1, 0, 0], [0, 1, 1]]
W_K = [[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 0, 1]]
W_V = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]]
'''


@dataclass(frozen=True)
class Notice:
    """A notification the app gave, as the tests read it."""

    message: str
    severity: str


@pytest.fixture(autouse=True)
def _recorded_notices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every app's notifications, kept for notices(app): Textual keeps its own only privately."""
    from textual.app import App

    notify, clear = App.notify, App.clear_notifications

    def recorded(self: App[object], message: str, **kwargs: object) -> None:
        vars(self).setdefault("test_notices", []).append(Notice(str(message), str(kwargs.get("severity", "information"))))
        notify(self, message, **kwargs)  # type: ignore[arg-type]

    def cleared(self: App[object]) -> None:
        vars(self)["test_notices"] = []
        clear(self)

    monkeypatch.setattr(App, "notify", recorded)
    monkeypatch.setattr(App, "clear_notifications", cleared)


def notices(app: object) -> list[Notice]:
    """The notifications the app gave since it last cleared them, oldest first."""
    return list(vars(app).get("test_notices", []))


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    def run(*args: str) -> Run:
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's --help / --version
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str | bytes], Path]:
    def make(content: str | bytes, name: str = "case.toml") -> Path:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return make


# --- tiers --------------------------------------------------------------------------------------
# Every test is sorted into tiers by what its code reaches, so a new test is sorted too:
#   snapshot  it takes the snap_compare fixture (a screen compared with its SVG; also app)
#   app       its code, its fixtures or the test helpers they call name run_test, Pilot or auto_pilot, or it
#             calls a package function that does (serve.zygote.first_frame): it drives the app
#   slow      it reaches torch or transformers (the references, ~10 s to import here), typesets a PDF
#             (typst, pypdf, "pdf"), serves the app ("--serve", tests/test_serve.py's serving) or drives a
#             browser, or it is in SLOW
#   unit      the rest: `pytest -m "not app and not slow and not snapshot"` is the quick tier
APP_NAMES = frozenset({"run_test", "Pilot", "auto_pilot"})
SLOW_NAMES = frozenset({"torch", "transformers", "typst", "pypdf", "pdf", "serving", "--serve", "sync_playwright"})
# Measured on the 2-core machine at load 7-9 (eight sessions sharing it), the whole suite run serially
# and the quick tier under -n 2, each test's call phase timed (a plugin writing report.duration of
# every "call" report): every test the rules above leave in the quick tier whose call took over 1 s
# in either run (about 0.3-0.5 s on an idle machine). They are 2% of those tests and were 60% of the
# quick tier's time. A name ending in "[" stands for every parameter of the test. To re-measure: run
# `pytest -n auto -m "not app and not slow and not snapshot" --durations=0` with SLOW emptied.
SLOW = frozenset({
    "test_accepted_inputs.py::test_every_command_accepts_what_check_accepts",
    "test_accepted_inputs.py::test_the_generator_reaches_both_outcomes",
    "test_backward_model_layer.py::test_the_exported_layer_trains",
    "test_calculator.py::test_generated_explanations_check_out",
    "test_calculator.py::test_generated_markdown_checks_out",
    "test_cli.py::test_a_terminal_on_standard_error_is_not_enough_without_one_on_input",
    "test_cli.py::test_builtin_names_work_from_any_folder",
    "test_cli.py::test_in_a_terminal_the_app_starts_and_quits",
    "test_cli.py::test_without_a_terminal_the_app_refuses_to_start",
    "test_decode.py::test_chunked_prefill_equals_full_causal_attention_for_every_chunk_size",
    "test_decode.py::test_decode_equals_full_attention_under_the_decode_mask",
    "test_engine.py::test_engine_matches_reference",
    "test_engine.py::test_invariants",
    "test_errors.py::test_real_process_prints_no_traceback",
    "test_export_toml.py::test_every_string_reads_back_exactly",
    "test_export_toml.py::test_generated_scenarios_round_trip",
    "test_fuzz_backward.py::test_generated_backward_scenarios_pass_every_path[",
    "test_fuzz_backward_regressions.py::test_what_fuzzing_found_now_passes_every_path[relu_row_dies_after_a_step]",
    "test_fuzz_latent_state_tables.py::test_generated_scenarios_pass_every_path[",
    "test_fuzz_parts_2026.py::test_generated_scenarios_pass_every_path[",
    "test_fuzz_parts_2026.py::test_extreme_scenarios_are_computed_or_refused_in_one_line[",
    "test_golden.py::test_outputs_as_frozen[builtin/mla_learns]",
    "test_golden.py::test_outputs_as_frozen[builtin/rope_layouts]",
    "test_golden.py::test_outputs_as_frozen[builtin/sixteen_tokens]",
    "test_golden.py::test_outputs_as_frozen[generated/modern_080]",
    "test_golden.py::test_outputs_as_frozen[generated/modern_100]",
    "test_golden.py::test_outputs_as_frozen[generated/modern_120]",
    "test_golden.py::test_outputs_as_frozen[generated/modern_140]",
    "test_golden.py::test_outputs_as_frozen[generated/modern_150]",
    "test_golden.py::test_outputs_as_frozen[generated/plain_070]",
    "test_hand_norm_rule.py::test_norm_by_hand_with_finer_inputs",
    "test_hand_norm_rule.py::test_qk_norm_by_hand_with_finer_inputs",
    "test_hostile_inputs.py::test_fifo_without_writer_does_not_block",
    "test_hostile_inputs.py::test_mutated_files_load_or_fail_cleanly",
    "test_hostile_inputs.py::test_unsearchable_folder_for_real",
    "test_hostile_latent_state_tables.py::test_hostile_files_are_one_error_line[deltanet_W_a_million]",
    "test_hostile_latent_state_tables.py::test_hostile_files_are_one_error_line[deltanet_g_million]",
    "test_hostile_latent_state_tables.py::test_hostile_files_are_one_error_line[mla_W_DKV_million]",
    "test_import_cycles.py::test_the_package_has_no_import_cycles",
    "test_importers_families.py::test_the_package_never_imports_transformers_or_torch",
    "test_importers_glassllm.py::test_a_head_subset_keeps_the_models_kv_heads",
    "test_importers_glassllm.py::test_every_head_equals_glassllms_own_attention[",
    "test_importers_input.py::test_the_exports_say_what_x_is",
    "test_importers_labels.py::test_the_map_the_summary_and_the_page",
    "test_imports.py::test_app_module_does_load_textual",
    "test_imports.py::test_core_imports_no_ui",
    "test_imports.py::test_the_first_screen_loads_only_what_it_shows",
    "test_imports.py::test_the_lazy_modules_do_load_when_used",
    "test_layers.py::test_imports_run_downward[importers/hf_deepseek.py]",
    "test_one_forward.py::test_no_module_outside_the_kernels_computes_a_kernel_itself[edges/worksheet/backward/linear.py]",
    "test_one_forward.py::test_no_module_outside_the_kernels_computes_a_kernel_itself[teach/tiled_backward.py]",
    "test_paged.py::test_paged_decode_equals_contiguous_decode",
    "test_production_lines.py::test_extreme_valid_inputs_check_out_without_overflow",
    "test_production_lines.py::test_generated_lines_check_out",
    "test_qk_norm.py::test_generated_scenarios_agree_with_the_loop",
    "test_quiz_what_if_rounding.py::test_hand_rounding_rounds_as_the_text_reads",
    "test_quiz_what_if_rounding_app.py::test_what_if_never_shows_nan_for_finite_scores",
    "test_serve_fork.py::test_read_only_goes_only_where_an_app_runs",
    "test_softcap.py::test_decode_and_tiles_agree_with_the_trace",
    "test_softcap.py::test_engine_agrees_with_an_independent_loop",
    "test_softcap.py::test_generated_markdown_checks_out",
    "test_softcap.py::test_generated_soft_cap_explanations_check_out",
    "test_softcap.py::test_toml_round_trip_keeps_every_cap",
    "test_tiled.py::test_each_rescale_follows_the_recurrence",
    "test_tiled.py::test_tiled_equals_plain_attention_for_every_tile_size",
    "test_tiled_backward.py::test_generated_backward_lines_check_out",
    "test_tiled_backward.py::test_tiled_gradients_equal_the_exact_ones",
    "test_tomlfile.py::test_fast_grids_equal_tomllib",
    "test_trace.py::test_every_operation_carries_its_engine_value",
    "test_variants.py::test_engine_matches_the_loop_reference",
    "test_variants.py::test_every_modern_line_checks_out_on_a_calculator",
    "test_variants.py::test_invariants",
    "test_variants.py::test_modern_markdown_checks_out_on_a_calculator",
    "test_variants.py::test_rope_scores_depend_only_on_distance",
    "test_variants.py::test_toml_export_round_trips_every_variant",
    "test_variants_together.py::test_every_line_checks_out[3]",
    "test_variants_together.py::test_every_line_checks_out[6]",
    "test_worksheet.py::test_generated_worksheets",
    "test_worksheet_backward_variants.py::test_generated_backward_pages_check_out",
    "test_worksheet_variants.py::test_generated_modern_worksheets",
    "test_wrap.py::test_every_line_fits_and_no_word_is_lost",
    "test_wrap.py::test_prose_fills_each_line_before_breaking",
})


def _names(code: types.CodeType) -> set[str]:
    """The names a function's code uses (globals, attributes, locals, each part of a dotted import) and its
    strings (keywords such as auto_pilot=, arguments such as "pdf"), its nested functions' too."""
    found = {part for name in (*code.co_names, *code.co_varnames, *code.co_cellvars, *code.co_freevars)
             for part in name.split(".")}
    consts = list(code.co_consts)
    while consts:
        const = consts.pop()
        if isinstance(const, types.CodeType):
            found |= _names(const)
        elif isinstance(const, str):
            found.add(const)
        elif isinstance(const, tuple | frozenset):
            consts.extend(const)
    return found


_TESTS = Path(__file__).resolve().parent


def _ours(obj: object) -> bool:
    """A function or module of the test suite itself (never the package or a library: those are not read)."""
    code = getattr(obj, "__code__", None)
    where = code.co_filename if code is not None else getattr(obj, "__file__", None)
    return where is not None and _in_tests(where)


@functools.cache
def _in_tests(filename: str) -> bool:
    return Path(filename).resolve().is_relative_to(_TESTS)


def _reached(func: Callable[..., object], cls: type | None, memo: dict[object, frozenset[str]]) -> frozenset[str]:
    """Every name the function's code uses, and the names used by the suite's own helpers it calls, transitively."""
    func = inspect.unwrap(func)
    inner = getattr(getattr(func, "hypothesis", None), "inner_test", None)  # @given wraps without __wrapped__
    if inner is not None:
        func = inspect.unwrap(inner)
    if func in memo:
        return memo[func]
    memo[func] = frozenset()  # a cycle between helpers adds nothing more
    code = getattr(func, "__code__", None)
    if code is None:
        return memo[func]
    names = _names(code)
    found = set(names)
    scope: dict[str, object] = dict(getattr(func, "__globals__", {}))
    if cls is not None:
        scope.update({name: getattr(cls, name, None) for name in dir(cls)})
    for name in names:
        target = scope.get(name)
        if isinstance(target, types.ModuleType) and _ours(target):
            candidates = [getattr(target, attr, None) for attr in names]  # helpers.f(...) reaches helpers.f
        else:
            candidates = [target]
        for candidate in candidates:
            if not inspect.isfunction(candidate):
                continue
            if _ours(candidate):
                if not candidate.__name__.startswith("test_"):  # another test named (tests/test_tiers.py) is not run
                    found |= _reached(candidate, None, memo)
            elif candidate.__module__.startswith("qkv_tui."):  # the package's own drivers (serve.zygote.first_frame)
                found |= _names(candidate.__code__) & APP_NAMES
    memo[func] = frozenset(found)
    return memo[func]


def tiers_of(funcs: list[Callable[..., object]], cls: type | None, fixturenames: list[str], test_id: str,
             memo: dict[object, frozenset[str]] | None = None) -> list[str]:
    """The tiers of a test: its function and its fixtures' (funcs), its class, the fixtures it takes, and
    its id as tests/-relative path::name[params]."""
    memo = {} if memo is None else memo
    names: set[str] = set()
    for func in funcs:
        names |= _reached(func, cls, memo)
    tiers = []
    snapshot = "snap_compare" in fixturenames
    if snapshot:
        tiers.append("snapshot")
    if snapshot or names & APP_NAMES:
        tiers.append("app")
    if names & SLOW_NAMES or test_id in SLOW or test_id.split("[")[0] + "[" in SLOW:
        tiers.append("slow")
    return tiers


def _tiers(item: pytest.Item, memo: dict[object, frozenset[str]]) -> list[str]:
    if not isinstance(item, pytest.Function):
        return []
    funcs = [item.function]
    for defs in item._fixtureinfo.name2fixturedefs.values():  # the fixtures it uses, and theirs
        funcs += [d.func for d in defs if _ours(d.func)]
    test_id = f"{item.path.relative_to(_TESTS)}::{item.nodeid.split('::', 1)[1]}"  # whatever the rootdir
    return tiers_of(funcs, item.cls, item.fixturenames, test_id, memo)


# --- order under pytest-xdist --------------------------------------------------------------------
# The last test a worker runs decides when the run ends: a 20-s app test drawn last leaves the other
# worker idle for 20 s. So the heavy tiers run first and the quick tier last (its tests are under 1 s
# each, SLOW above), and an idle worker steals half of the other's remaining queue (--dist worksteal)
# instead of waiting for a fixed batch: the run ends on small tests on both workers at once.
# Per test, measured by CPU time under -n 2: app and slow tests average about 1 s, the quick tier 0.05 s.

# Tests the quick tier keeps (a person's answer in 3 minutes holds them) that took over 8 s each in a quick-tier
# run under -n 2 at load 16 (about 1-4 s on an idle machine): they run with the heavy tiers, not last. So do the
# quick tests that share a module-scoped fixture with a heavy test of their file (a tiny transformers model, a
# trained layer): run apart from it, a serial run would build the fixture twice.
LONG_QUICK = frozenset({
    "test_backward_model_layer.py::test_its_gradient_is_the_loss_s_slope",
    "test_importers_counts_bounded_by_weights.py::test_a_gguf_head_count_past_its_tensors",
    "test_app_refuses_what_check_refuses.py::test_the_app_opens_what_check_accepts_and_refuses_what_it_refuses",
    "test_export_toml_file_name.py::test_any_source_name_keeps_the_first_line_one_comment",
    "test_exports_accept_what_check_accepts.py::test_every_export_accepts_what_check_accepts[",
    "test_gate.py::test_generated_gates_agree_with_a_loop_and_check_out",
    "test_golden.py::test_outputs_as_frozen[builtin/deltanet_learns]",
    "test_golden.py::test_outputs_as_frozen[builtin/qk_norm_all]",
    "test_importers_counts_bounded_by_weights.py::test_a_gguf_block_count_past_its_tensors",
    "test_imports.py::test_the_deferred_modules_load_where_they_are_used",
    "test_one_forward.py::test_by_hand_every_table_is_worked_from_its_rounded_operands",
    "test_one_forward.py::test_exact_agrees_with_the_loop_reference",
    "test_one_forward.py::test_the_printed_page_works_each_table_from_the_printed_ones",
    "test_worksheet_accepts_what_check_accepts.py::test_every_accepted_scenario_makes_a_worksheet",
})


def _weight(item: pytest.Item) -> int:
    """0 for a test in both heavy tiers, 1 in one (or in LONG_QUICK), 2 in none; sorted stably, so a file's tests
    keep their order."""
    marks = {mark.name for mark in item.iter_markers()}
    heavy = ("app" in marks or "snapshot" in marks) + ("slow" in marks)
    path, _, name = item.nodeid.partition("::")
    test_id = f"{Path(path).name}::{name}"  # as in SLOW
    if not heavy and (test_id in LONG_QUICK or test_id.split("[")[0] + "[" in LONG_QUICK):
        heavy = 1
    return 2 - heavy


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    memo: dict[object, frozenset[str]] = {}
    for item in items:
        for tier in _tiers(item, memo):
            item.add_marker(tier)
    items.sort(key=_weight)


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own, which would answer load
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """-n's default distribution (load) becomes worksteal; an explicit --dist is kept."""
    if config.getvalue("dist") != "load" or any(arg.startswith(("--dist", "-d")) for arg in config.invocation_params.args):
        return None
    from xdist.scheduler import WorkStealingScheduling

    return WorkStealingScheduling(config, log)


# --- snapshots under pytest-xdist ----------------------------------------------------------------
# syrupy fails a serial run that leaves an SVG under tests/__snapshots__ no test asked for (a renamed or
# deleted snapshot test), but under xdist it skips that check: each worker ran only part of the tests.
# Each worker sends what it would call unused and what it used or skipped; the controller keeps what no
# worker used and fails the run on it, as syrupy does serially (with --snapshot-update it deletes them).
_COUNTS = ("matched", "failed", "created", "updated")  # syrupy's own counts, summed over the workers


def _snapshot_files(collections: object) -> set[str]:
    return {str(collection.location) for collection in collections}  # type: ignore[attr-defined]


@pytest.hookimpl(trylast=True)  # after syrupy's own, which builds the report
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    report = getattr(getattr(config, "_syrupy", None), "report", None)
    if report is not None and hasattr(config, "workeroutput"):
        skipped = {str(c.location) for c in report.discovered for s in c
                   if report._skipped_items_match_name(str(c.location), s.name)}
        config.workeroutput["snapshots"] = {"unused": sorted(_snapshot_files(report.unused)),
                                            "used": sorted(_snapshot_files(report.used) | skipped),
                                            **{key: getattr(report, f"num_{key}") for key in _COUNTS}}
    elif hasattr(config, "_snapshots_from_workers"):
        seen = config._snapshots_from_workers
        unused = sorted(seen["unused"] - seen["used"])
        counts = ", ".join(f"{seen[key]} {key}" for key in _COUNTS if seen[key])
        config._snapshots_report = [f"snapshots: {counts}"] if counts else []
        if unused and config.option.update_snapshots:
            for path in unused:
                Path(path).unlink(missing_ok=True)
            config._snapshots_report += [f"{len(unused)} unused snapshots deleted:", *unused]
        elif unused:
            config._snapshots_report += [f"{len(unused)} snapshots unused (no test asked for them):", *unused,
                                         "Re-run with --snapshot-update to delete them."]
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """xdist's controller, as each worker ends: gather what its snapshot report said."""
    sent = getattr(node, "workeroutput", {}).get("snapshots")
    if sent is None:
        return
    config = node.config  # type: ignore[attr-defined]
    if not hasattr(config, "_snapshots_from_workers"):
        config._snapshots_from_workers = {"unused": set(), "used": set(), **dict.fromkeys(_COUNTS, 0)}
    for key in ("unused", "used"):
        config._snapshots_from_workers[key] |= set(sent[key])
    for key in _COUNTS:
        config._snapshots_from_workers[key] += sent[key]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    lines = getattr(config, "_snapshots_report", None)
    if lines:
        terminalreporter.write_sep("-", "snapshots across the xdist workers")
        for line in lines:
            terminalreporter.write_line(line)
