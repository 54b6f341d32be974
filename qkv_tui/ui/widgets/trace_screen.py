"""The app's own screen: the trace, under every overlay."""

from __future__ import annotations

from textual import events
from textual.geometry import Size
from textual.screen import Screen


class TraceScreen(Screen[None]):
    """Textual's default screen, less the passes on its way to the first frame that change nothing.

    - Textual restyles a screen's whole tree each time it resumes, for what changed while another screen
      was on top. The first resume comes just after every widget was styled as it mounted, with nothing
      between them to change a style (a class set in between restyles its own subtree then): that pass
      gave every widget the rules it already had, a tenth of a start's CPU. Each later resume restyles.
    - Textual lays the whole screen out and draws it again for every Resize it gets, and a start brings
      three of the size it was just laid out at (the driver's own, repeated once the app is idle, and the
      screen's from its first layout): each drew the same frame again. A Resize to another size, and
      every change of a widget (which lays out and draws what changed on its own), go on as before.
    """

    _resumed = False

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        if not self._resumed:
            self._resumed = True
            event.refresh_styles = False
        # no super() call: Textual runs each class's own handler up the MRO, Screen's next, with this event. Calling
        # it here too ran Screen's twice a resume: a whole restyle twice after every overlay closed, and at the start
        # two signals of changed keys, each composing the footer's keys anew

    def _screen_resized(self, size: Size) -> None:
        if size == self._compositor.size:
            return
        super()._screen_resized(size)
