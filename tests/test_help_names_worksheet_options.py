"""``--help``'s ``--export`` entry names every option a worksheet takes, not only --blanks and --seed: each
of them is refused without ``--export worksheet`` (edges/cli.py, misplaced), so the entry is where to learn them."""

from __future__ import annotations

import re


def test_the_export_entry_names_every_worksheet_option(cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    run = cli("--help")
    assert run.code == 0
    entry = re.search(r"^  --export FORMAT\s+(.*?)^  --check", run.out, re.M | re.S)
    assert entry is not None, run.out
    words = " ".join(entry.group(1).split())
    assert "worksheet: a printable page with blanks to fill in and an answer key (--blanks, --seed, --stages, --heads," \
           " --format, --key, -o)" in words, words
    assert "or a worksheet to -o FILE" in words
