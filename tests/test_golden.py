"""The golden corpus (tests/golden): today's outputs stay as they were frozen, unless a commit says why.

The suite checks a fixed sample (every built-in but the real model's, and every tenth generated
scenario) to stay quick; ``python -m tests.golden check`` checks the whole corpus, as a refactor should.
"""

from __future__ import annotations

import json

import pytest

from qkv_tui.core.scenario import load_scenario
from tests.golden.corpus import INPUTS, MANIFEST, digest, render

FROZEN: dict[str, dict[str, str]] = json.loads(MANIFEST.read_text(encoding="utf-8"))
SAMPLE = [name for name in FROZEN if name.startswith("builtin/") and "glassllm" not in name]
SAMPLE += sorted(name for name in FROZEN if name.startswith("generated/"))[::10]


@pytest.mark.parametrize("name", SAMPLE)
def test_outputs_as_frozen(name: str) -> None:
    kind_of, stem = name.split("/", 1)
    sc = load_scenario(stem if kind_of == "builtin" else INPUTS / f"{stem}.toml")
    changed = [kind for kind, text in render(sc).items() if digest(kind, text) != FROZEN[name][kind]]
    assert not changed, f"{name}: {', '.join(changed)} differ from the golden corpus (python -m tests.golden dump DIR shows them)"


def test_every_generated_input_is_in_the_manifest() -> None:
    assert sorted(f"generated/{p.stem}" for p in INPUTS.glob("*.toml")) == sorted(n for n in FROZEN if n.startswith("generated/"))
