"""--serve: a student's ctrl+s downloads the edited scenario in the browser and writes nothing on
the server (its folders are shared by every student and every restart).

Driven like tests/test_serve.py's screenshot: Debian's chromium through Playwright, the download
caught as the page fetches /download/KEY. The server runs in a folder of its own, with HOME and
the XDG folders pointed into the test's folder, so a file written anywhere it could write shows.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from qkv_tui.core.scenario import builtin_dir

from .test_serve import CHROMIUM, FLAGS, HOOK, WAIT_MS, catch_downloads, serving, wait_for_a_download


def tree(folder: Path) -> dict[str, str]:
    """Every file under a folder with a hash of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture
def classroom(tmp_path: Path) -> Iterator[tuple[str, list[Path]]]:
    """`qkv-tui --serve i_love_ai` started in an empty folder; its URL and the folders it could write to."""
    folders = [tmp_path / name for name in ("server", "home", "config", "data", "cache")]
    for folder in folders:
        folder.mkdir()
    env = {**os.environ, "HOME": str(folders[1]), "XDG_CONFIG_HOME": str(folders[2]),
           "XDG_DATA_HOME": str(folders[3]), "XDG_CACHE_HOME": str(folders[4])}
    with serving(tmp_path, cwd=folders[0], env=env) as url:  # the server's own folder is folders[0]
        yield url, folders


def test_ctrl_s_in_a_browser_downloads_the_edited_file_and_writes_nothing(
        classroom: tuple[str, list[Path]], tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("no chromium on this machine (Debian: apt-get install -y chromium; .ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
    server, folders = classroom
    builtins_before = tree(builtin_dir())
    with sync_api.sync_playwright() as driver:
        context = driver.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
        )
        try:
            page = context.new_page()
            page.add_init_script(HOOK)
            page.goto(server, timeout=WAIT_MS)
            page.wait_for_function("() => window.__qkvText().includes('op 1/66')", timeout=WAIT_MS)
            page.click(".xterm-screen")  # keys go to the terminal that has focus
            downloads = catch_downloads(context)
            page.keyboard.press("e")  # the prompt opens on X[I,0] = 1, selected: typing replaces it
            page.wait_for_function("() => window.__qkvText().includes('X[I,0] =')", timeout=WAIT_MS)
            page.keyboard.type("7")
            page.keyboard.press("Enter")
            page.wait_for_function("() => window.__qkvText().includes('edited')", timeout=WAIT_MS)
            page.keyboard.press("Control+s")
            wait_for_a_download(page, downloads)
            assert downloads, "no download followed ctrl+s"
            page.wait_for_function("() => window.__qkvText().includes('Downloading i_love_ai.toml')", timeout=WAIT_MS)
        finally:
            context.close()
    disposition, body = downloads[0]
    assert "i_love_ai.toml" in disposition
    text = body.decode("utf-8")
    assert tomllib.loads(text)["X"][0] == [7, 0, 1, 0]  # the edit
    assert "[0, 1, 0, 1],   # love" in text  # and the file's comments and layout, as a local save keeps them
    for folder in folders:
        assert tree(folder) == {}, f"the server wrote into {folder}"
    assert tree(builtin_dir()) == builtins_before
