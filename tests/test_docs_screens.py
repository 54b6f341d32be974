"""The documentation's screen pictures (the README's, the Students page's) are the snapshots the suite checks,
so they never show an old screen.

They are kept without the snapshot's web-font rule (as the app's own screenshots are), so the README
opened offline or behind a strict policy asks no other host for fonts."""

from __future__ import annotations

from pathlib import Path

import pytest

from qkv_tui.ui.screenshot import without_web_fonts

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = ROOT / "tests" / "__snapshots__" / "test_snapshots"
PICTURES = {
    "screen-softmax.svg": "TestSeedStages.test_stage[softmax-120x40].svg",
    "screen-decode.svg": "TestModes.test_decode[120x40].svg",
    "screen-tiles.svg": "TestProduction.test_tiles_sixteen_tokens[120x40].svg",
}


@pytest.mark.parametrize("picture", sorted(PICTURES))
def test_a_readme_picture_is_its_snapshot(picture: str) -> None:
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    assert any(picture in page.read_text(encoding="utf-8") for page in pages), f"no page shows docs/{picture}"
    shown = (ROOT / "docs" / picture).read_text(encoding="utf-8")
    snapshot = (SNAPSHOTS / PICTURES[picture]).read_text(encoding="utf-8")
    assert "cdnjs" in snapshot and "cdnjs" not in shown and "http" not in shown.split("</style>")[0].split("<style>")[-1]
    assert shown == without_web_fonts(snapshot), (
        f"docs/{picture} is out of date: write without_web_fonts() of tests/__snapshots__/test_snapshots/"
        f"{PICTURES[picture]} over it"
    )
