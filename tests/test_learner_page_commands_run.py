"""docs/my-attention-is-wrong.md: every qkv-tui command on the page that reads the example files runs, and
gives what the page says (exit 0 for correct.npz; exit 1 and the file's own mistake named for the rest);
the example files hold what scenarios/learner/make_examples.py writes; the page's table
names every mistake the diagnosis can name."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.core.diagnose import MISTAKES
from qkv_tui.edges.cli import main

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "my-attention-is-wrong.md"
EXAMPLES = ROOT / "scenarios" / "learner"


def _commands() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    return [line for block in blocks for line in block.splitlines()
            if line.startswith("qkv-tui ") and "scenarios/learner/" in line and "--export json" in line]


def test_the_page_shows_commands_for_the_examples() -> None:
    named = {Path(word).stem for line in _commands() for word in shlex.split(line) if word.endswith(".npz")}
    assert named == {p.stem for p in EXAMPLES.glob("*.npz")}


@pytest.mark.parametrize("line", _commands())
def test_each_command_on_the_page_gives_what_it_says(line: str, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    words = shlex.split(line)[1:]
    if ">" in words:
        words = words[:words.index(">")]
    stem = Path(next(w for w in words if w.endswith(".npz"))).stem
    capsys.readouterr()
    status = main(words)
    report = json.loads(capsys.readouterr().out)["compare"]
    if stem == "correct":
        assert (status, report["agree"], report["diagnosis"]) == (0, True, [])
    else:
        assert (status, report["diagnosis"]) == (1, [stem])


def test_the_example_files_are_the_scripts(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_examples", EXAMPLES / "make_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path)
    made = sorted(p.name for p in tmp_path.glob("*.npz"))
    assert made == sorted(p.name for p in EXAMPLES.glob("*.npz"))
    for name in made:  # the same numbers; the last bits of a float32 product depend on the machine's BLAS
        with np.load(tmp_path / name) as new, np.load(EXAMPLES / name) as old:
            assert sorted(new.files) == sorted(old.files)
            for key in new.files:
                assert new[key].dtype == old[key].dtype, (name, key)
                np.testing.assert_allclose(new[key], old[key], rtol=1e-5, atol=1e-6, err_msg=f"{name} {key}")


def test_the_table_names_every_mistake() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for name in MISTAKES:
        assert f"| `{name}` |" in text, name
