"""Under pytest-xdist the heavy tiers run first and idle workers steal work, so the run does not end on one long test."""

from __future__ import annotations

import pytest

from .conftest import _weight, pytest_xdist_make_scheduler


class Marked:
    """A test as _weight reads it: only its marks."""

    def __init__(self, *names: str, nodeid: str = "tests/test_x.py::test_y") -> None:
        self.names = names
        self.nodeid = nodeid

    def iter_markers(self) -> list[pytest.Mark]:
        return [getattr(pytest.mark, name).mark for name in self.names]


def marked(*names: str, nodeid: str = "tests/test_x.py::test_y") -> pytest.Item:
    return Marked(*names, nodeid=nodeid)  # type: ignore[return-value]


def test_app_and_slow_tests_sort_before_the_quick_tier() -> None:
    items = [marked(), marked("app"), marked("slow"), marked("app", "slow"), marked("snapshot", "app"), marked()]
    order = sorted(range(len(items)), key=lambda i: _weight(items[i]))
    assert order == [3, 1, 2, 4, 0, 5]  # both heavy tiers, then one (in collection order), then the rest


def test_long_quick_tests_run_with_the_heavy_tiers() -> None:
    golden = "tests/test_golden.py::test_outputs_as_frozen[builtin/deltanet_learns]"  # a "/" in its parameter
    exports = "tests/test_exports_accept_what_check_accepts.py::test_every_export_accepts_what_check_accepts[plain]"
    assert _weight(marked(nodeid=golden)) == _weight(marked(nodeid=exports)) == _weight(marked("app")) == 1
    assert _weight(marked(nodeid="tests/test_golden.py::test_outputs_as_frozen[builtin/seed]")) == 2
    assert _weight(marked("slow", nodeid=golden)) == 1  # no heavier than its tier says


class Config:
    def __init__(self, dist: str, *args: str) -> None:
        self.dist = dist
        self.invocation_params = type("Params", (), {"args": args})()

    def getvalue(self, name: str) -> str:
        return self.dist


def test_the_default_distribution_becomes_worksteal_and_an_explicit_one_is_kept() -> None:
    from xdist.scheduler import WorkStealingScheduling

    config = Config("load", "-n", "auto")
    config.option = type("Option", (), {"numprocesses": 2, "tx": [], "maxschedchunk": None})()  # type: ignore[attr-defined]
    assert isinstance(pytest_xdist_make_scheduler(config, None), WorkStealingScheduling)  # type: ignore[arg-type]
    assert pytest_xdist_make_scheduler(Config("load", "-n", "2", "--dist", "load"), None) is None  # type: ignore[arg-type]
    assert pytest_xdist_make_scheduler(Config("loadfile", "-n", "2", "--dist=loadfile"), None) is None  # type: ignore[arg-type]
    assert pytest_xdist_make_scheduler(Config("no"), None) is None  # type: ignore[arg-type]
