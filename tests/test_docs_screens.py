"""The README's screen pictures are the snapshots the suite checks, so they never show an old screen."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = ROOT / "tests" / "__snapshots__" / "test_snapshots"
PICTURES = {
    "screen-softmax.svg": "TestSeedStages.test_stage[softmax-120x40].svg",
    "screen-decode.svg": "TestModes.test_decode[120x40].svg",
    "screen-tiles.svg": "TestProduction.test_tiles_sixteen_tokens[120x40].svg",
}


@pytest.mark.parametrize("picture", sorted(PICTURES))
def test_a_readme_picture_is_its_snapshot(picture: str) -> None:
    assert picture in (ROOT / "README.md").read_text(encoding="utf-8")
    shown = (ROOT / "docs" / picture).read_bytes()
    assert shown == (SNAPSHOTS / PICTURES[picture]).read_bytes(), (
        f"docs/{picture} is out of date: copy tests/__snapshots__/test_snapshots/{PICTURES[picture]} over it"
    )
