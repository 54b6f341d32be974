"""The app starter of ``--serve`` (its "zygote"): one process that has imported everything a
student's app needs, and forks a copy of itself for each browser tab.

A fresh Python per tab imports Textual and NumPy again (most of a start's CPU) and keeps its own
copy of every module in memory; a forked child starts with both already there, and shares the
pages it does not write with every other child (fork.py is the server's side of it).

Run by the server as ``python -m qkv_tui.edges.serve.zygote FD ARG…``, with the environment textual-serve
gives an app (Textual reads its TEXTUAL_* settings once, at import), FD being its end of a Unix
SEQPACKET socket and ARG… every tab's command line (the scenario it prepares: prepared.py).
Messages are JSON, one a packet:

- server -> zygote: ``{"op": "fork", "id": N, "env": {...}, "argv": [...]}`` with three file
  descriptors attached (SCM_RIGHTS): the app's standard input, output and error (pipes to the server);
- zygote -> server: ``{"op": "ready", "pid": P}`` once, when everything is imported;
  ``{"op": "forked", "id": N, "pid": P}`` (or ``"error"`` with a reason) per request, and
  ``{"op": "exit", "pid": P, "status": S}`` when a child ends (S as subprocess gives it: -9 for SIGKILL).

Requests waiting together are forked together, and their apps start once the last is forked
(fork_waiting), so that thirty arriving at once are not forked one per time slice of a busy machine.
The zygote never runs an app itself and keeps no state of a child's: a crash is the child's alone.
It ends when the server does (its socket closes), ending the apps it started.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import io
import json
import os
import select
import selectors
import signal
import socket
import sys
import time
import traceback
import types
from collections.abc import Callable, MutableMapping
from typing import Any

from qkv_tui.edges.serve import compact as serve_compact
from qkv_tui.edges.serve import prepared as serve_prepared

# What an app imports by the time a student sees the first screen, and what the first uses of
# edit, save, help, the map and a screenshot import: each child then finds it already loaded.
PRELOAD = (
    "numpy", "textual.app", "textual.drivers.web_driver", "textual.widgets", "textual.widgets._input",
    "textual.widgets._static", "textual.command", "textual._xterm_parser", "textual.css.stylesheet",
    "qkv_tui.edges.cli", "qkv_tui.ui.app", "qkv_tui.ui.edit_prompt", "qkv_tui.ui.screenshot",
    "qkv_tui.ui.widgets.heatmap", "qkv_tui.ui.widgets.screens", "qkv_tui.ui.widgets.modal",
    "qkv_tui.display.heatmap", "qkv_tui.teach.whatif", "tomlkit", "encodings.utf_8_sig", "textual.scrollbar",
    "textual.layouts.factory", "textual.layouts.horizontal", "textual.layouts.vertical", "textual.layouts.stream",
    "textual.layouts.grid",
)
MAX_MESSAGE = 1 << 20  # an environment and a command line fit many times over
BATCH_S = 0.1  # the apps forked together start together, unless their forks take longer than this


def send(channel: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the server is gone: the loop sees its socket close and ends
        channel.send(json.dumps(message).encode())


def preload(argv: list[str] | None = None) -> None:
    for name in PRELOAD:
        with contextlib.suppress(Exception):  # a module missing only costs a child the import later
            importlib.import_module(name)
    with contextlib.suppress(Exception):  # Rich loads its table of character widths with the first wide one
        from rich.cells import cell_len

        cell_len("·→√")
    # the package froze what its imports made (qkv_tui/__init__.py, a lone start's saving); here the collects
    # below are to find the imports' and warm-up's garbage before the layout and the freeze at the end, so thaw
    # it: left frozen, that garbage stayed in the pages the children write to (1.2 MiB a student more)
    gc.unfreeze()
    called = warm_up(argv or [])
    # The code the first frame ran, copied into pages of its own (compact.py); a second warm-up then
    # specialises the copies here, not in every app. The free blocks are filled before the copies are
    # made (so they are made together) and again at the end (for what the copying and the second warm-up
    # freed). A layout that fails only costs the children pages.
    gc.collect()
    with contextlib.suppress(Exception):
        serve_compact.fill_free_blocks()
        serve_compact.pack_code(called)
    called.clear()
    gc.collect()
    warm_up(argv or [], first=False)
    gc.collect()
    with contextlib.suppress(Exception):
        serve_compact.fill_free_blocks()
    # Objects made so far are never collected: the collector then does not touch (and so copy) their pages
    gc.freeze()


def warm_up(argv: list[str], first: bool = True) -> dict[int, types.CodeType]:
    """Draw the first frame of a tab's app (``argv``, its command line) here, headless, before any fork: what
    a first frame imports late and the caches it fills (styles, colours, cell widths, the scenario's panes and
    text) are then in every child already, in pages they share, instead of being made again (and written
    into private pages) by each; the scenario, loaded and computed, is kept for the children to take
    (prepared.py). It leaves no thread and no loop behind, and writes nothing.

    The first returns the code its first frame ran (compact.calls); a second (``first`` False) keeps
    nothing and records nothing: a profiled interpreter runs code unspecialised, and it is there to
    specialise the copies compact.pack_code made."""
    import asyncio
    import threading

    from qkv_tui.ui.app import QKVApp

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # what is wrong with it, each child says to its tab
            prepared, app = prepared_app(argv)
        if first:
            serve_prepared.keep(prepared)
    except (Exception, SystemExit):
        app = QKVApp("i_love_ai")  # a command line that cannot be prepared still warms the styles and caches
    called: dict[int, types.CodeType] = {}
    # a warm-up that fails only costs the children their own start
    with contextlib.suppress(Exception), serve_compact.calls(called) if first else contextlib.nullcontext():
        asyncio.run(first_frame(app))
    if threading.active_count() > 1:  # a fork copies only the thread that forks: say so, never hang on it
        sys.stderr.write(f"qkv-tui: the app starter's warm-up left {threading.active_count() - 1} thread(s) running\n")
    return called


def prepared_app(argv: list[str]) -> tuple[serve_prepared.Prepared, Any]:
    """The served scenario prepared, and an app made from it as the command line's own would be."""
    from qkv_tui.edges import model_args, place_args
    from qkv_tui.edges.cli import _parser
    from qkv_tui.ui.app import QKVApp

    args = _parser().parse_args(argv)  # the parser is kept for every child's too
    if model_args.wants_model(args) or len(args.scenario) != 1:
        raise ValueError("not a scenario file")
    prepared = serve_prepared.prepare(args.scenario[0])
    if prepared is None:
        raise ValueError("cannot be prepared")
    return prepared, QKVApp(prepared.scenario, theme=args.theme, read_only=bool(args.read_only),
                            place=place_args.place(args, prepared.comp), decimals=args.decimals,
                            presenter=prepared.presenter)


async def first_frame(app: Any = None) -> None:
    """An app's first frame (the built-in scenario's, without one), headless, as a tab's app draws it
    (tests/test_shared_css.py counts what it parses)."""
    from textual import events

    from qkv_tui.ui.app import QKVApp

    app = QKVApp("i_love_ai") if app is None else app
    # with the tooltip and the notifications' rack, as a tab's app has them
    async with app.run_test(size=(120, 40), tooltips=True, notifications=True) as pilot:
        await pilot.pause()
        # a tab's app starts blurred (Textual's web driver says so), and is focused when the page is:
        # each restyles every widget, so the styles of both are ready too (ui/shared_css.py)
        for change in (events.AppBlur(), events.AppFocus()):
            app.post_message(change)
            await pilot.pause()


def become_environment(environment: MutableMapping[str, str], wanted: dict[str, str]) -> None:
    """``environment`` made equal to ``wanted``, changing only what differs (a tab's environment is the app
    starter's but for its size): cleared and filled again, every string of it was freed and made anew in
    pages each child then owned, 0.2 MiB of a student's memory (benchmarks/serve_cost.py)."""
    for key in [key for key in environment if key not in wanted]:
        del environment[key]
    for key, value in wanted.items():
        if environment.get(key) != value:
            environment[key] = value


def run_child(request: dict[str, Any], fds: list[int], close_zygote: Callable[[], None],
              gate: tuple[int, int]) -> None:
    """In the forked child: become the tab's app process, run the app, exit; never returns.

    ``gate``: a pipe the apps forked together share; the app starts when every end it has to write is closed."""
    code = 1
    try:
        os.close(gate[1])  # first: the apps forked before this one wait for it
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        close_zygote()  # the zygote's own: its socket to the server, its selector and signal pipe
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        become_environment(os.environ, request["env"])
        # A start makes tens of thousands of objects and keeps nearly all: the collector's passes over
        # them before the first frame were a tenth of a start's CPU and found a few kilobytes of cycles.
        # The app turns it back on once its first frame is drawn (QKVApp.on_mount).
        gc.disable()
        os.read(gate[0], 1)  # at end of file: the app starter has forked the others waiting with it
        os.close(gate[0])
        argv = [str(arg) for arg in request["argv"]]
        sys.argv = ["qkv-tui", *argv]
        from qkv_tui.edges.cli import main

        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # as an interpreter's own exit would
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(channel: socket.socket) -> None:
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _number, _frame: None)  # wakes the loop through the pipe
    # Ctrl+C at the server's terminal reaches every process of its group: the apps end on it, the
    # server ends them too; the zygote ends when the server's socket closes, not halfway through a fork
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    selector = selectors.DefaultSelector()
    selector.register(channel, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    send(channel, {"op": "ready", "pid": os.getpid()})
    children: set[int] = set()

    def close_zygote() -> None:
        selector.close()
        channel.close()
        os.close(wake_r)
        os.close(wake_w)

    try:
        while True:
            for key, _ in selector.select():
                if key.fileobj is channel:
                    if not fork_waiting(channel, children, close_zygote):
                        return
                else:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(wake_r, 512):
                            pass
                    reap(channel, children)
    finally:
        for pid in children:  # the server is gone: so is every tab
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)


def fork_waiting(channel: socket.socket, children: set[int], close_zygote: Callable[[], None]) -> bool:
    """An app forked for every request waiting (one at least); False when the server has gone.

    The apps of requests that arrive together start together, once the last of them is forked (a pipe
    they share closes), or once BATCH_S has gone by while requests kept coming. An app that ran at once
    would share the cores with this process while it forked the next: a class arriving at once had its
    apps forked about one per time slice, the last of thirty long after the first (benchmarks/serve_cost.py).
    """
    gate = os.pipe()
    until = time.monotonic() + BATCH_S
    try:
        while True:  # select, not MSG_DONTWAIT: Python 3.11's socket.recv_fds ignores its flags
            try:
                data, fds, _flags, _address = socket.recv_fds(channel, MAX_MESSAGE, 3)
            except InterruptedError:
                return True
            if not data:
                return False
            fork(channel, data, fds, children, close_zygote, gate)
            if time.monotonic() > until or not select.select([channel], [], [], 0)[0]:
                return True
    finally:
        for end in gate:
            os.close(end)


def fork(channel: socket.socket, data: bytes, fds: list[int], children: set[int], close_zygote: Callable[[], None],
         gate: tuple[int, int]) -> None:
    request: dict[str, Any] = {}
    try:
        request = json.loads(data)
        if request.get("op") != "fork" or len(fds) != 3:
            raise ValueError(f"expected a fork request with 3 file descriptors, got {request.get('op')!r} with {len(fds)}")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
    except Exception as exc:
        for fd in fds:
            os.close(fd)
        send(channel, {"op": "error", "id": request.get("id"), "error": str(exc) or type(exc).__name__})
        return
    if pid == 0:
        run_child(request, fds, close_zygote, gate)
    for fd in fds:  # the child's now
        os.close(fd)
    children.add(pid)
    send(channel, {"op": "forked", "id": request["id"], "pid": pid})


def reap(channel: socket.socket, children: set[int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        send(channel, {"op": "exit", "pid": pid, "status": os.waitstatus_to_exitcode(status)})


def main(argv: list[str]) -> int:
    channel = socket.socket(fileno=int(argv[1]))
    preload(argv[2:])
    serve(channel)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
