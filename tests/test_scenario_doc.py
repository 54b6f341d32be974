"""docs/scenario-format.md keeps in step with the loader: every key it accepts, its limits,
and the messages it quotes."""

from __future__ import annotations

import re

import pytest

from qkv_tui.core import tomlfile
from qkv_tui.core.scenario import MASK_KINDS, ScenarioError, key_tables, parse_scenario

from .conftest import BASE, HEAD, ROOT

DOC = (ROOT / "docs" / "scenario-format.md").read_text(encoding="utf-8")


def section(table: str) -> str:
    """The text under the heading that names a table ("" is the top level)."""
    title = "Top level" if table == "" else f"`{table}`"
    found = re.search(rf"^###? {re.escape(title)}.*?$(.*?)(?=^##)", DOC, re.M | re.S)
    assert found, f"no section for {table or 'the top level'}"
    return found.group(1)


@pytest.mark.parametrize("table", sorted(key_tables()))
def test_every_key_the_loader_accepts_is_documented_in_its_table(table: str) -> None:
    text = section(table)
    for key in key_tables()[table]:
        assert re.search(rf"^\| `{re.escape(key)}` \|", text, re.M), f"{key} in {table or 'top level'}"


def test_every_documented_key_is_accepted() -> None:
    for table in key_tables():
        rows = re.findall(r"^\| `(\w+)` \|", section(table), re.M)
        assert set(rows) == set(key_tables()[table]), table


def test_mask_kinds_and_limits_match_the_loader() -> None:
    for kind in MASK_KINDS:
        assert f'`"{kind}"`' in section("[mask]")
    assert f"at most **{tomlfile.MAX_BYTES_TEXT}**" in DOC
    assert f"more than {tomlfile._DEPTH_SHOWN} levels deep" in DOC


@pytest.mark.parametrize("text,quoted", [
    (BASE + HEAD + "scale = 1\n",
     "key 'scale' is not allowed in [[heads]] #1: scale is a top-level key; write it above the\nfirst [table] header"),
    (BASE.replace("[0, 1, 0, 1]", "[0, nan, 0, 1]") + HEAD, 'X row 2 ("love"), column 2 is nan; expected a finite number'),
    ('tokens = ["I"]\nX = [[1, 0, 1, 0]\n',
     "line 2, column 5: TOML syntax error: the file ends inside the array that opens here;\n  expected ']'"),
])
def test_quoted_messages_are_what_the_loader_says(text: str, quoted: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, "f.toml")
    assert caught.value.message.startswith(re.sub(r"\s*\n\s*", " ", quoted))
    assert quoted in DOC


def test_readme_points_at_the_doc_and_never_outside_the_repository() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/scenario-format.md" in readme
    assert "../shared" not in readme and "../shared" not in DOC
