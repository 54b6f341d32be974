"""The server's side of the app starter (zygote.py): each browser tab's app is forked from a
process that has already imported everything, instead of a fresh Python started through ``sh -c``.

textual-serve's AppService talks to its app over the app's standard input and output (Textual's
web driver protocol), and reads its standard error to print it if the app fails. ForkedAppService
keeps that contract: it only replaces how the process is opened, with an object that has what
AppService uses of an asyncio subprocess (stdin writer, stdout and stderr readers) plus its pid,
its exit status as the zygote reports it, wait() and kill(). Each app is its own process: a crash
ends only it (its tab's page says the session ended), and the zygote and the server go on.

A zygote that dies is started again for the next tab, and said so in one line; when one cannot be
started at all, tabs start the old way (a fresh Python each), also said in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from asyncio.streams import FlowControlMixin
from asyncio.subprocess import Process
from typing import Any, cast

from textual_serve.app_service import AppService

QUIT_SECONDS = 10.0  # an app told to quit (its tab closed) that is still running after this is killed
READY_SECONDS = 120.0  # the zygote's imports, on a machine busy with a class arriving
MAX_MESSAGE = 1 << 16
GIVE_UP_AFTER = 3  # zygotes in a row that died before they were ready: tabs start the old way


class ZygoteError(Exception):
    """The zygote cannot fork an app (it died, or could not start)."""


def say(line: str) -> None:
    sys.stderr.write(f"qkv-tui: {line}\n")
    sys.stderr.flush()


class ForkedApp:
    """One tab's app process, forked by the zygote: the parts of asyncio's Process that AppService uses."""

    def __init__(self, pid: int, stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader,
                 stderr: asyncio.StreamReader, exited: asyncio.Future[int]) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self._exited = exited

    @property
    def returncode(self) -> int | None:
        """As subprocess gives it (negative: the signal that ended it); None while it runs or when unknown."""
        return self._exited.result() if self._exited.done() and not self._exited.cancelled() else None

    async def wait(self) -> int | None:
        """Its exit status; None when the zygote that would report it died (the app was orphaned)."""
        try:
            return await asyncio.shield(self._exited)
        except asyncio.CancelledError:
            if self._exited.cancelled():
                return None
            raise  # the waiter itself was cancelled (a timeout): not to be taken for an exit

    def send_signal(self, number: int) -> None:
        if self._exited.done():
            return  # reaped: the pid may be another process's by now
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close(self) -> None:
        """The server's end of the app's standard input (the readers close themselves at end of file)."""
        self.stdin.close()


class Zygote:
    """The app starter, as the server sees it: started once, restarted when it dies."""

    def __init__(self, env: dict[str, str], argv: list[str] | None = None) -> None:
        self.env = env  # textual-serve's environment for an app: the zygote imports Textual under it
        self.argv = argv or []  # every tab's command line: the zygote prepares its scenario
        self.process: subprocess.Popen[bytes] | None = None
        self.channel: socket.socket | None = None
        self.ready: asyncio.Future[int] | None = None
        self.requests: dict[int, asyncio.Future[int]] = {}
        self.exits: dict[int, asyncio.Future[int]] = {}
        self.next_id = 0
        self.failures = 0  # zygotes in a row that died before they were ready
        self.lock = asyncio.Lock()

    @property
    def alive(self) -> bool:
        return self.channel is not None

    def start(self) -> None:
        """Start a zygote (its imports go on in the background; fork() waits for them)."""
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "qkv_tui.edges.serve.zygote", str(theirs.fileno()), *self.argv],
                env=self.env, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self.channel = ours
        self.ready = loop.create_future()
        loop.add_reader(ours.fileno(), self._readable)

    async def wait_ready(self) -> bool:
        """Wait for the zygote's imports; False when it ended first (said in one line) or took too long."""
        if self.ready is None:
            return False
        try:
            await asyncio.wait_for(asyncio.shield(self.ready), READY_SECONDS)
        except (ZygoteError, TimeoutError):
            return False
        return True

    def stop(self) -> None:
        """At the server's end: closing the socket ends the zygote, which ends the apps it started."""
        self._lost(None)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)

    def _readable(self) -> None:
        channel = self.channel
        while channel is not None:
            try:
                data = channel.recv(MAX_MESSAGE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._lost("ended")
                return
            self._message(json.loads(data))

    def _message(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op == "ready" and self.ready is not None and not self.ready.done():
            self.failures = 0
            self.ready.set_result(int(message["pid"]))
        elif op in ("forked", "error"):
            waiting = self.requests.pop(int(message["id"]), None)
            if waiting is not None and not waiting.done():
                if op == "forked":
                    waiting.set_result(int(message["pid"]))
                else:
                    waiting.set_exception(ZygoteError(str(message.get("error"))))
        elif op == "exit":
            exited = self.exits.pop(int(message["pid"]), None)
            if exited is not None and not exited.done():
                exited.set_result(int(message["status"]))

    def _lost(self, why: str | None) -> None:
        """The zygote's socket closed: fail what waits on it; say so once, unless the server stopped it."""
        channel, self.channel = self.channel, None
        if channel is None:
            return
        asyncio.get_running_loop().remove_reader(channel.fileno())
        channel.close()
        was_ready = self.ready is not None and self.ready.done() and not self.ready.exception()
        error = ZygoteError("the app starter ended")
        for future in (self.ready, *self.requests.values()):
            if future is not None and not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: nobody may be waiting on it
        self.requests.clear()
        # its apps were orphaned, not ended: they run on, but their exit status is no longer known
        for future in self.exits.values():
            future.cancel()
        self.exits.clear()
        if why is None:
            return
        status = self.process.poll() if self.process is not None else None
        if status is None and self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                status = self.process.wait(timeout=1)
        how = (f"killed by signal {-status}" if status is not None and status < 0
               else f"exit status {status}" if status is not None else "still running")
        pid = self.process.pid if self.process is not None else "?"
        if not was_ready:
            self.failures += 1
        if self.failures >= GIVE_UP_AFTER:
            say(f"the app starter (pid {pid}) ended before it was ready ({how}), {self.failures} times in a row:"
                " each student's app starts as a fresh Python now (slower)")
        else:
            say(f"the app starter (pid {pid}) ended ({how}); the next student's app starts a new one")

    async def fork(self, env: dict[str, str], argv: list[str]) -> ForkedApp:
        """A new app process with env and the command line's argv, connected by pipes to this process."""
        if self.failures >= GIVE_UP_AFTER:
            raise ZygoteError("the app starter could not be started")
        loop = asyncio.get_running_loop()
        async with self.lock:  # one request at a time, so a restart happens once
            if not self.alive:
                try:
                    self.start()
                except OSError as exc:
                    self.failures = GIVE_UP_AFTER
                    say(f"cannot start the app starter ({exc.strerror or exc}): each student's app starts as a"
                        " fresh Python (slower)")
                    raise ZygoteError(str(exc)) from exc
            assert self.ready is not None and self.channel is not None
            channel = self.channel
            try:
                await asyncio.wait_for(asyncio.shield(self.ready), READY_SECONDS)
            except TimeoutError:
                self._kill_zygote()
                raise ZygoteError("the app starter was not ready in time") from None
            pipes = [os.pipe() for _ in range(3)]  # stdin, stdout, stderr: (read end, write end)
            theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
            ours = [pipes[0][1], pipes[1][0], pipes[2][0]]
            self.next_id += 1
            request = self.next_id
            forked: asyncio.Future[int] = loop.create_future()
            self.requests[request] = forked
            try:
                message = json.dumps({"op": "fork", "id": request, "env": env, "argv": argv}).encode()
                socket.send_fds(channel, [message], theirs)
            except OSError as exc:
                self.requests.pop(request, None)
                for fd in ours:
                    os.close(fd)
                raise ZygoteError(str(exc)) from exc
            finally:
                for fd in theirs:
                    os.close(fd)
        try:
            pid = await forked
        except ZygoteError:
            for fd in ours:
                os.close(fd)
            raise
        exited: asyncio.Future[int] = loop.create_future()
        self.exits[pid] = exited
        return ForkedApp(pid, await _writer(ours[0]), await _reader(ours[1]), await _reader(ours[2]), exited)

    def _kill_zygote(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()


async def _reader(fd: int) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**16, loop=loop)  # asyncio's own limit for a subprocess's pipes
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), os.fdopen(fd, "rb", 0))
    return reader


async def _writer(fd: int) -> asyncio.StreamWriter:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_write_pipe(lambda: FlowControlMixin(loop=loop), os.fdopen(fd, "wb", 0))
    return asyncio.StreamWriter(transport, protocol, None, loop)


class ForkedAppService(AppService):
    """textual-serve's AppService, its app forked by the zygote; the old way when there is none."""

    def __init__(self, command: str, *, zygote: Zygote | None, argv: list[str], **kwargs: Any) -> None:
        super().__init__(command, **kwargs)
        self.zygote = zygote
        self.argv = argv
        self.forked: ForkedApp | None = None

    async def _open_app_process(self, width: int = 80, height: int = 24) -> Process:
        if self.zygote is not None:
            try:
                self.forked = await self.zygote.fork(self._build_environment(width=width, height=height), self.argv)
            except ZygoteError:
                pass  # said in one line by the zygote; this tab starts the old way
            else:
                self._process = cast(Process, self.forked)  # what AppService.run reads of it: stdout, stderr
                self._stdin = self.forked.stdin
                return self._process
        return await super()._open_app_process(width, height)

    async def run(self) -> None:
        await super().run()  # until the app's output ends: it exited, or crashed
        # a crash leaves the tab's page frozen on its last frame; closed, the page says the session ended
        with contextlib.suppress(Exception):
            await self.remote_close()

    async def stop(self) -> None:
        """The tab closed (or the server stops): tell the app to quit; one that does not is killed."""
        task = self._task
        if task is not None:
            await self._download_manager.cancel_app_downloads(app_service_id=self.app_service_id)
            await self.send_meta({"type": "quit"})
            try:
                await asyncio.wait_for(asyncio.shield(task), QUIT_SECONDS)
            except TimeoutError:
                self._kill()
                await task
            self._task = None
        if self.forked is not None:
            forked, self.forked = self.forked, None
            forked.close()
            try:
                await asyncio.wait_for(forked.wait(), QUIT_SECONDS)
            except TimeoutError:  # its output ended but it runs on (a stray thread, say)
                forked.kill()

    def _kill(self) -> None:
        if self.forked is not None:
            self.forked.kill()
        elif self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
