"""Comparing a fresh manifest with the frozen one, entry by entry."""

from __future__ import annotations

import json

from tests.golden.corpus import MANIFEST


def differences(fresh: dict[str, dict[str, str]]) -> list[str]:
    frozen: dict[str, dict[str, str]] = json.loads(MANIFEST.read_text(encoding="utf-8"))
    diffs = [f"missing now: {name}" for name in frozen if name not in fresh]
    diffs += [f"new: {name}" for name in fresh if name not in frozen]
    for name in sorted(set(frozen) & set(fresh)):
        for kind in sorted(set(frozen[name]) | set(fresh[name])):
            if frozen[name].get(kind) != fresh[name].get(kind):
                diffs.append(f"changed: {name} {kind}")
    return diffs
