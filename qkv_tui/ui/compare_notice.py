"""--compare in the app: the app opened at the first cell that differs, with a notice saying which stages
agreed, the learner's number beside the right one, and the mistake named (edges/compare.py makes the text)."""

from __future__ import annotations

from qkv_tui.ui.app import QKVApp

NOTICE_SECONDS = 30  # long enough to read four lines and compare two numbers


def noticed(text: str) -> type[QKVApp]:
    """QKVApp that shows ``text`` as a notice once it is on screen."""

    class ComparedApp(QKVApp):
        def on_mount(self) -> None:
            # no super(): Textual runs each class's own on_mount up the MRO, so QKVApp's (the file watch, the
            # first frame's work) ran twice under --compare
            agreed = text.startswith("agree")
            self.notify(text, title="your numbers", severity="information" if agreed else "warning",
                        timeout=NOTICE_SECONDS)

    return ComparedApp
