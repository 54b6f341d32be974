"""The app's own screen: the trace, under every overlay."""

from __future__ import annotations

from textual import events
from textual.screen import Screen


class TraceScreen(Screen[None]):
    """Textual's default screen, less one restyle of every widget on its way to the first frame.

    Textual restyles a screen's whole tree each time it resumes, for what changed while another screen
    was on top. The first resume comes just after every widget was styled as it mounted, with nothing
    between them to change a style (a class set in between restyles its own subtree then): that pass
    gave every widget the rules it already had, a tenth of a start's CPU. Each later resume restyles.
    """

    _resumed = False

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        if not self._resumed:
            self._resumed = True
            event.refresh_styles = False
        super()._on_screen_resume(event)
