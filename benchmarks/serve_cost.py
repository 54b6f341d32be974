"""What one student costs under `qkv-tui --serve`: memory per app process and start-up time.

Starts the real server on a free port, then connects students the way a browser tab does (a
websocket to /ws with the terminal's size) and waits for each app's first complete frame (the
operation counter "op 1/" in what the app sends). Measured:

- start-up, one student at a time: websocket open -> first complete frame (median);
- a class arriving at once: N websockets opened together -> the last first frame;
- CPU per student beyond the start: an idle app's share of a core (a tab left open through a lecture),
  and one step (a right arrow, the screen redrawn) -- what sizes a class per core;
- memory per student: RSS and PSS (shared pages split between the processes that share them)
  of each app's processes, and the pages only it holds (what the app starter's pages it wrote to
  cost it), read from /proc once every app is idle; the app starter that
  --serve forks every app from (its "zygote") is counted apart, and also shared out;
- the yardstick, in the same run: a bare Textual app (one Static) served by plain
  textual-serve, a fresh Python per tab, one student at a time; the ratios divide by its median.

With ``--nginx`` the students connect through Debian's nginx at /class/ (as docs/deploy.md sets it up),
and the proxy's own memory and CPU are measured too.

    .venv/bin/python benchmarks/serve_cost.py [--students N] [--repeat R] [--nginx] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import aiohttp

T = TypeVar("T")

IDLE_S = 5.0  # how long the open, untouched apps are watched for their idle CPU
KEYS, KEY_GAP_S = 5, 0.5  # steps every student takes, and the time between them (a class at a teacher's pace)

MARK = b"op 1/"
# the yardstick: the smallest Textual app that draws the mark, started as textual-serve starts any app
BARE_APP = ("from textual.app import App\nfrom textual.widgets import Static\n"
            "class Bare(App[None]):\n    def compose(self):\n        yield Static('op 1/1')\nBare().run()\n")
BARE_SERVER = ("import sys\nfrom textual_serve.server import Server\n"
               "Server(sys.argv[1], host='127.0.0.1', port=int(sys.argv[2])).serve()\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children(pid: int) -> list[int]:
    """Every descendant process of pid (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def cpu_seconds(pid: int) -> float:
    """User and system CPU time a process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process in KiB."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def private_kib(pid: int) -> int:
    """The pages of one process that no other process shares (its own, and the app starter's it copied), in KiB."""
    try:
        return sum(int(line.split()[1]) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
                   if line.startswith(("Private_Clean:", "Private_Dirty:")))
    except OSError:
        return 0


READERS: set[asyncio.Task[None]] = set()


async def drain(ws: aiohttp.ClientWebSocketResponse) -> None:
    """Read on, as a browser does: aiohttp answers the server's heartbeat pings only while a socket is
    read, and the server closes one that has not answered for 15 s (a slow class takes longer)."""
    async for _message in ws:
        pass


async def first_frame(session: aiohttp.ClientSession, url: str) -> tuple[float, aiohttp.ClientWebSocketResponse]:
    """Open one student's app; seconds until its first complete frame arrives."""
    start = time.perf_counter()
    ws = await session.ws_connect(f"{url}?width=120&height=40")
    seen = b""
    async for message in ws:
        if message.type == aiohttp.WSMsgType.BINARY:
            seen = (seen + message.data)[-65536:]
            if MARK in seen:
                took = time.perf_counter() - start
                reader = asyncio.create_task(drain(ws))
                READERS.add(reader)
                reader.add_done_callback(READERS.discard)
                return took, ws
        elif message.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
            break
    raise RuntimeError("the app closed before its first frame")


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


NGINX_CONF = """daemon off;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {folder}/body; proxy_temp_path {folder}/proxy; fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi; scgi_temp_path {folder}/scgi;
    map $http_upgrade $qkv_connection {{ default upgrade; '' close; }}
    server {{
        listen 127.0.0.1:{listen};
        location /class/ {{
            proxy_pass http://127.0.0.1:{port}/;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $qkv_connection;
        }}
    }}
}}
"""


@contextmanager
def nginx_in_front(port: int) -> Iterator[tuple[str, int]]:
    """nginx (as this user, everything in a temporary folder) serving the server on port at /class/:
    the websocket address through it, and nginx's master pid (its worker is the master's child)."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    listen = free_port()
    with tempfile.TemporaryDirectory(prefix="serve-cost-nginx-") as folder:
        (Path(folder) / "nginx.conf").write_text(NGINX_CONF.format(folder=folder, listen=listen, port=port))
        master = subprocess.Popen([binary, "-p", folder, "-e", f"{folder}/error.log", "-c", f"{folder}/nginx.conf"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(600):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{listen}/class/", timeout=5).close()
                    break
                except OSError:
                    time.sleep(0.1)
            yield f"ws://127.0.0.1:{listen}/class/ws", master.pid
        finally:
            master.terminate()
            master.wait(timeout=30)


async def measure_via_nginx(port: int, server_pid: int, students: int) -> dict[str, object]:
    with nginx_in_front(port) as (url, proxy_pid):
        return await measure(port, server_pid, students, url, proxy_pid)


async def measure(port: int, server_pid: int, students: int, url: str | None = None,
                  proxy_pid: int | None = None) -> dict[str, object]:
    url = url or f"ws://127.0.0.1:{port}/ws"
    proxy = children(proxy_pid) if proxy_pid is not None else []  # nginx's worker
    proxy_idle = [memory_kib(pid) for pid in proxy]
    async with aiohttp.ClientSession() as session:
        sequential, sockets = [], []
        for _ in range(students):
            seconds, ws = await first_frame(session, url)
            sequential.append(seconds)
            sockets.append(ws)
        await asyncio.sleep(2.0)  # every app idle before memory is read
        everyone = children(server_pid)
        # the zygote is the server's own child; the apps it forked have its command line too
        zygotes = [pid for pid in everyone if "serve.zygote" in command_line(pid) and parent(pid) == server_pid]
        apps = [pid for pid in everyone if pid not in zygotes]
        assert len(apps) >= students, f"{len(apps)} app processes for {students} students: some ended early"
        usage = [memory_kib(pid) for pid in apps]
        private = [private_kib(pid) for pid in apps]
        started = [cpu_seconds(pid) for pid in apps]  # idle since their first frame: what a start costs
        zygote_rss, zygote_pss = (sum(m) for m in zip(*(memory_kib(pid) for pid in zygotes), strict=True)) \
            if zygotes else (0, 0)
        server_rss, server_pss = memory_kib(server_pid)
        proxy_busy = [memory_kib(pid) for pid in proxy]
        idle_cpu, idle_s = sum(cpu_seconds(pid) for pid in apps), time.perf_counter()
        await asyncio.sleep(IDLE_S)
        idle_share = (sum(cpu_seconds(pid) for pid in apps) - idle_cpu) / (time.perf_counter() - idle_s) / students
        before_keys = sum(cpu_seconds(pid) for pid in apps)
        for _ in range(KEYS):  # every student steps at once, as a class following the teacher does
            for ws in sockets:
                await ws.send_json(["stdin", "\x1b[C"])
            await asyncio.sleep(KEY_GAP_S)
        await asyncio.sleep(2.0)  # the last redraws done
        key_cpu = (sum(cpu_seconds(pid) for pid in apps) - before_keys) / (students * KEYS)
        for ws in sockets:
            await ws.close()
        await asyncio.sleep(2.0)
        server_cpu = cpu_seconds(server_pid)
        zygote_cpu = sum(cpu_seconds(pid) for pid in zygotes)
        proxy_cpu = sum(cpu_seconds(pid) for pid in proxy)
        start = time.perf_counter()
        burst = await asyncio.gather(*(first_frame(session, url) for _ in range(students)))
        burst_last = time.perf_counter() - start
        server_burst_cpu = cpu_seconds(server_pid) - server_cpu
        zygote_burst_cpu = sum(cpu_seconds(pid) for pid in zygotes) - zygote_cpu
        burst_apps = [pid for pid in children(server_pid) if pid not in zygotes]
        burst_cpu = [cpu_seconds(pid) for pid in burst_apps]
        proxy_burst_cpu = sum(cpu_seconds(pid) for pid in proxy) - proxy_cpu
        for _, ws in burst:
            await ws.close()
    return {
        "students": students,
        "processes_per_student": len(apps) / students,
        "startup_median_s": statistics.median(sequential),
        "startup_all_s": sequential,
        "burst_last_s": burst_last,
        "burst_all_s": sorted(seconds for seconds, _ in burst),
        "rss_per_student_mib": sum(r for r, _ in usage) / students / 1024,
        "pss_per_student_mib": sum(p for _, p in usage) / students / 1024,
        # what PSS is made of: an app's own pages, the rest being its share of pages shared with the others
        "private_per_student_mib": sum(private) / students / 1024,
        # the zygote's share too: what the class costs beyond the server, divided by its size
        "pss_per_student_with_zygote_mib": (sum(p for _, p in usage) + zygote_pss) / students / 1024,
        "zygote_rss_mib": zygote_rss / 1024,
        "zygote_pss_mib": zygote_pss / 1024,
        "idle_cpu_share_per_student": idle_share,  # of one core, apps open and untouched
        "key_cpu_s": key_cpu,  # one step, per student (the screen redrawn at 120x40)
        "app_start_cpu_s": sum(started) / students,  # a student's processes together (sh and Python, before)
        "server_burst_cpu_s": server_burst_cpu,
        "zygote_burst_cpu_s": zygote_burst_cpu,
        "burst_apps_cpu_total_s": sum(burst_cpu),
        "server_rss_mib": server_rss / 1024,
        "server_pss_mib": server_pss / 1024,
        # with --nginx: the proxy's worker, its memory per student (every student connected minus none) and
        # its CPU while the class arrived
        **({"proxy_rss_per_student_kib": (sum(r for r, _ in proxy_busy) - sum(r for r, _ in proxy_idle)) / students,
            "proxy_rss_mib": sum(r for r, _ in proxy_busy) / 1024,
            "proxy_burst_cpu_s": proxy_burst_cpu} if proxy else {}),
    }


async def measure_bare(port: int, server_pid: int, starts: int) -> tuple[list[float], list[float]]:
    """The yardstick: a bare Textual app's start-up, one student at a time; and the CPU each used."""
    seconds, cpu = [], []
    async with aiohttp.ClientSession() as session:
        for _ in range(starts):
            took, ws = await first_frame(session, f"ws://127.0.0.1:{port}/ws")
            seconds.append(took)
            await asyncio.sleep(0.5)
            cpu.append(sum(cpu_seconds(pid) for pid in children(server_pid)))
            await ws.close()
            await asyncio.sleep(0.5)
    return seconds, cpu


def running(command: Callable[[int], list[str]], root: Path, call: Callable[[int, int], Awaitable[T]]) -> T:
    """Start the server command(port) names, wait until it answers, measure it with call(port, pid), stop it."""
    port = free_port()
    server = subprocess.Popen(command(port), cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).close()
                break
            except OSError:
                time.sleep(0.1)
        return asyncio.run(call(port, server.pid))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=1, help="whole runs, each with its own yardstick (the spread)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--nginx", action="store_true", help="the students connect through nginx at /class/")
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    compileall.compile_dir(str(root / "qkv_tui"), quiet=1)  # as pip install does; this machine sets PYTHONDONTWRITEBYTECODE
    bare_command = shlex.join([sys.executable, "-c", BARE_APP])
    runs = []
    for _ in range(args.repeat):
        bare, bare_cpu = running(lambda port: [sys.executable, "-c", BARE_SERVER, bare_command, str(port)], root,
                                 lambda port, pid: measure_bare(port, pid, 5))
        result = running(lambda port: [sys.executable, "-m", "qkv_tui", "--serve", "--port", str(port), "i_love_ai"],
                         root, lambda port, pid: (measure_via_nginx if args.nginx else measure)(port, pid, args.students))
        result["bare_startup_median_s"] = bare_median = statistics.median(bare)
        result["bare_startup_all_s"] = bare
        result["bare_start_cpu_median_s"] = statistics.median(bare_cpu)
        result["startup_ratio"] = float(result["startup_median_s"]) / bare_median  # type: ignore[arg-type]
        result["burst_ratio"] = float(result["burst_last_s"]) / bare_median  # type: ignore[arg-type]
        result["load_average"] = os.getloadavg()[0]
        runs.append(result)
    if args.json:
        print(json.dumps(runs if args.repeat > 1 else runs[0], indent=2))
        return 0
    for result in runs:
        report(result, args.students)
    if args.repeat > 1:
        for key in ("startup_ratio", "burst_ratio", "pss_per_student_mib"):
            values = sorted(float(r[key]) for r in runs)  # type: ignore[arg-type]
            print(f"{key}: median {statistics.median(values):.2f}, from {values[0]:.2f} to {values[-1]:.2f}")
    return 0


def report(result: dict[str, object], students: int) -> None:
    print(f"machine: {platform.machine()}, CPython {platform.python_version()}, {os.cpu_count()} cores; "
          f"{students} students, i_love_ai at 120×40")
    print(f"start-up, one student at a time: median {result['startup_median_s']:.2f} s (websocket open -> first frame)")
    print(f"a class arriving at once ({students}): the last first frame after {result['burst_last_s']:.2f} s")
    print(f"memory per student: RSS {result['rss_per_student_mib']:.1f} MiB, PSS {result['pss_per_student_mib']:.1f} MiB"
          f" ({result['processes_per_student']:.0f} process(es) each), of which its own pages"
          f" {result['private_per_student_mib']:.1f} MiB")
    print(f"the server itself: RSS {result['server_rss_mib']:.1f} MiB, PSS {result['server_pss_mib']:.1f} MiB")
    print(f"CPU: an app's start, mean {result['app_start_cpu_s']:.2f} s (a bare Textual app's, median:"
          f" {result['bare_start_cpu_median_s']:.2f} s); the server's during the class's arrival"
          f" {result['server_burst_cpu_s']:.2f} s, the app starter's {result['zygote_burst_cpu_s']:.2f} s, the"
          f" class's apps' {result['burst_apps_cpu_total_s']:.2f} s in all")
    print(f"CPU per student after the start: idle {100 * float(result['idle_cpu_share_per_student']):.2f}% of a core;"  # type: ignore[arg-type]
          f" one step (right arrow, redrawn) {1000 * float(result['key_cpu_s']):.0f} ms")  # type: ignore[arg-type]
    if "proxy_rss_mib" in result:
        print(f"nginx in front: its worker's RSS {result['proxy_rss_mib']:.1f} MiB with every student connected,"
              f" {result['proxy_rss_per_student_kib']:.0f} KiB more per student; its CPU while the class arrived"
              f" {result['proxy_burst_cpu_s']:.2f} s")
    if result["zygote_rss_mib"]:
        print(f"the app starter (zygote): RSS {result['zygote_rss_mib']:.1f} MiB, PSS {result['zygote_pss_mib']:.1f} MiB;"
              f" per student with its share: PSS {result['pss_per_student_with_zygote_mib']:.1f} MiB")
    print(f"a bare Textual app (plain textual-serve, a fresh Python): median start-up {result['bare_startup_median_s']:.2f} s;"
          f" ratios: one student {result['startup_ratio']:.2f}x, the last of the class {result['burst_ratio']:.2f}x"
          f" (load average {result['load_average']:.1f})")


if __name__ == "__main__":
    raise SystemExit(main())
