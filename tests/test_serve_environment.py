"""A forked tab's app takes the tab's environment from the app starter's by changing only what differs
(edges/serve/zygote.py: become_environment); what it ends with is the tab's, as clearing and refilling gave."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from qkv_tui.edges.serve.zygote import become_environment


def test_the_environment_becomes_the_wanted_one() -> None:
    environment = {"KEEP": "same", "COLUMNS": "120", "ROWS": "40", "GONE": "x"}
    wanted = {"KEEP": "same", "COLUMNS": "80", "ROWS": "40", "NEW": "y"}
    become_environment(environment, wanted)
    assert environment == wanted
    assert list(environment) == ["KEEP", "COLUMNS", "ROWS", "NEW"]  # the starter's order, then what is new


def test_the_process_environment_changes_for_what_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QKV_TEST_SIZE", "120")
    monkeypatch.setenv("QKV_TEST_GONE", "1")
    monkeypatch.delenv("QKV_TEST_NEW", raising=False)
    wanted = {key: value for key, value in os.environ.items() if key != "QKV_TEST_GONE"}
    wanted["QKV_TEST_SIZE"] = "80"
    wanted["QKV_TEST_NEW"] = "yes"
    become_environment(os.environ, wanted)
    assert dict(os.environ) == wanted
    seen = subprocess.run([sys.executable, "-c", "import os; print(sorted(k for k in os.environ if k.startswith("
                           "'QKV_TEST_')), os.environ['QKV_TEST_SIZE'])"], capture_output=True, text=True, check=True)
    assert seen.stdout.split() == ["['QKV_TEST_NEW',", "'QKV_TEST_SIZE']", "80"]
