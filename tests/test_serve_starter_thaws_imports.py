"""The package freezes what its imports made (qkv_tui/__init__.py, ui/app.py): a lone start then skips the
collector's first full pass. The --serve app starter collects the garbage of its imports and warm-up before it
lays its memory out and freezes it for the children (edges/serve/zygote.py); with the imports left frozen that
garbage could not be collected and a student cost 16.3 MiB, not 15.1 (benchmarks/serve_cost.py). So the starter
thaws what the imports froze before its warm-up."""

from __future__ import annotations

import gc

import pytest

from qkv_tui.edges.serve import zygote


def test_the_starter_thaws_the_imports_before_its_warm_up(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    monkeypatch.setattr(zygote, "PRELOAD", ())
    monkeypatch.setattr(zygote.gc, "unfreeze", lambda: said.append("unfreeze"))
    monkeypatch.setattr(zygote.gc, "freeze", lambda: said.append("freeze"))
    monkeypatch.setattr(zygote.gc, "collect", lambda *a: said.append("collect") or 0)

    def warm_up(argv: list[str], first: bool = True) -> set[object]:
        said.append("warm_up")
        return set()

    monkeypatch.setattr(zygote, "warm_up", warm_up)
    monkeypatch.setattr(zygote.serve_compact, "fill_free_blocks", lambda: None)
    monkeypatch.setattr(zygote.serve_compact, "pack_code", lambda called: None)
    zygote.preload([])
    assert said.index("unfreeze") < said.index("warm_up") < said.index("collect")
    assert said[-1] == "freeze"


def test_importing_the_package_froze_its_imports() -> None:
    import qkv_tui  # noqa: F401 - the import is what is checked

    assert gc.get_freeze_count() > 0
