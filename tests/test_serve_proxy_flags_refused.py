"""--public-url and --max-students: a value that cannot work, or either flag without --serve, is one
`error:` line and exit 2, before anything is served."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(("args", "says"), [
    (["--serve", "--max-students", "0"], "error: --max-students 0: expected a number of students, 1 or more"),
    (["--serve", "--max-students", "-3"], "error: --max-students -3: expected a number of students, 1 or more"),
    (["--serve", "--max-students", "many"], "error: argument --max-students: invalid int value: 'many'"),
    (["--serve", "--public-url", "ftp://class.example.org/"],
     "error: --public-url ftp://class.example.org/: expected the address students open, starting http:// or https://"),
    (["--serve", "--public-url", "class.example.org"], "error: --public-url class.example.org: expected the address"),
    (["--serve", "--public-url", "https://h:x/"], "error: --public-url https://h:x/: expected a port number"),
    (["--max-students", "30"], "error: --max-students goes only with --serve"),
    (["--public-url", "https://h/class/", "--max-students", "3", "--export", "json"],
     "error: --public-url and --max-students go only with --serve"),
])
def test_bad_proxy_flags_are_one_error_line(args: list[str], says: str) -> None:
    run = subprocess.run([sys.executable, "-m", "qkv_tui", *args, "i_love_ai"], capture_output=True, text=True,
                         timeout=120, stdin=subprocess.DEVNULL)
    assert run.returncode == 2, run
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(says), run.stderr
    assert run.stdout == ""
