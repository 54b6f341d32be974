"""An SVG of the screen reads as the screen does, in a viewer that applies XML's whitespace rule.

Rich writes each run of equally styled cells as one ``<text>`` placed at its first cell; librsvg
(rsvg-convert, many desktops' SVG viewers) drops a text's leading blanks unless ``xml:space`` says
"preserve", and draws the rest from that cell. The panes' numbers then sat on their row labels
("love0 1 0 1") though the terminal showed "love 0 1 0 1". ``laid_out`` draws the text as such a viewer does.
"""

from __future__ import annotations

import html
import re

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.screenshot import keeping_blanks

TEXT = re.compile(r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)" textLength="([\d.]+)"[^>]*>(.*?)</text>')
BLANKS = " \xa0"


def laid_out(svg: str) -> list[str]:
    """The screen's lines as an SVG viewer draws them: without xml:space="preserve", each text's leading
    blanks are dropped and what is left starts at the text's own position."""
    preserve = 'xml:space="preserve"' in svg.split(">", 1)[0]
    runs = [(float(x), float(y), float(length), html.unescape(body)) for x, y, length, body in TEXT.findall(svg)]
    cell = min(length / len(body) for _, _, length, body in runs if body)
    lines: dict[float, list[str]] = {}
    for x, y, _, body in runs:
        shown = body if preserve else body.lstrip(BLANKS)
        line = lines.setdefault(y, [" "] * 400)
        start = round(x / cell)
        for i, ch in enumerate(shown.replace("\xa0", " ")):
            line[start + i] = ch
    return ["".join(line).rstrip() for _, line in sorted(lines.items())]


async def test_a_panes_numbers_stand_apart_from_its_row_labels_in_the_svg() -> None:
    app = QKVApp("causal_mask")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")  # Scale: the context panes below hold X, Q, K and V, whole numbers in 1-wide columns
        await pilot.pause()
        # both ways of writing the runs: cell by cell (the s key's) and merged (the snapshots')
        pictures = [laid_out(app.export_screenshot(simplify=simplify)) for simplify in (False, True)]
    for lines in pictures:
        _check(lines)


def _check(lines: list[str]) -> None:
    x_rows = [line for line in lines if "│I    1 0 1 0" in line or "│love 0 1 0 1" in line or "│AI   1 1 0 0" in line]
    assert len(x_rows) == 3, "\n".join(lines)
    assert not [line for line in lines if re.search(r"│(love|AI|I)[0-9−]", line)], "\n".join(lines)
    assert "│     0 1 2 3" in "\n".join(lines)  # X's column header stands over its column


def test_keeping_blanks_marks_the_root_element_only() -> None:
    svg = '<svg class="rich-terminal" viewBox="0 0 1 1"><svg x="0"><text x="0" y="1">&#160;1</text></svg></svg>'
    kept = keeping_blanks(svg)
    assert kept.startswith('<svg xml:space="preserve" class="rich-terminal"') and kept.count("xml:space") == 1
