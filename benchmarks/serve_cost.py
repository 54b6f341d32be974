"""What one student costs under `qkv-tui --serve`: memory per app process and start-up time.

Starts the real server on a free port, then connects students the way a browser tab does (a
websocket to /ws with the terminal's size) and waits for each app's first complete frame (the
operation counter "op 1/" in what the app sends). Measured:

- start-up, one student at a time: websocket open -> first complete frame (median);
- a class arriving at once: N websockets opened together -> the last first frame;
- memory per student: RSS and PSS (shared pages split between the processes that share them)
  of each app's processes, read from /proc once every app is idle.

    .venv/bin/python benchmarks/serve_cost.py [--students N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp

MARK = b"op 1/"


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


async def first_frame(session: aiohttp.ClientSession, url: str) -> tuple[float, aiohttp.ClientWebSocketResponse]:
    """Open one student's app; seconds until its first complete frame arrives."""
    start = time.perf_counter()
    ws = await session.ws_connect(f"{url}?width=120&height=40")
    seen = b""
    async for message in ws:
        if message.type == aiohttp.WSMsgType.BINARY:
            seen = (seen + message.data)[-65536:]
            if MARK in seen:
                return time.perf_counter() - start, ws
        elif message.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
            break
    raise RuntimeError("the app closed before its first frame")


async def measure(port: int, server_pid: int, students: int) -> dict[str, object]:
    url = f"ws://127.0.0.1:{port}/ws"
    async with aiohttp.ClientSession() as session:
        sequential, sockets = [], []
        for _ in range(students):
            seconds, ws = await first_frame(session, url)
            sequential.append(seconds)
            sockets.append(ws)
        await asyncio.sleep(2.0)  # every app idle before memory is read
        apps = children(server_pid)
        usage = [memory_kib(pid) for pid in apps]
        server_rss, server_pss = memory_kib(server_pid)
        for ws in sockets:
            await ws.close()
        await asyncio.sleep(2.0)
        start = time.perf_counter()
        burst = await asyncio.gather(*(first_frame(session, url) for _ in range(students)))
        burst_last = time.perf_counter() - start
        for _, ws in burst:
            await ws.close()
    return {
        "students": students,
        "processes_per_student": len(apps) / students,
        "startup_median_s": statistics.median(sequential),
        "startup_all_s": sequential,
        "burst_last_s": burst_last,
        "rss_per_student_mib": sum(r for r, _ in usage) / students / 1024,
        "pss_per_student_mib": sum(p for _, p in usage) / students / 1024,
        "server_rss_mib": server_rss / 1024,
        "server_pss_mib": server_pss / 1024,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=6)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    port = free_port()
    root = Path(__file__).resolve().parent.parent
    compileall.compile_dir(str(root / "qkv_tui"), quiet=1)  # as pip install does; this machine sets PYTHONDONTWRITEBYTECODE
    server = subprocess.Popen(
        [sys.executable, "-m", "qkv_tui", "--serve", "--port", str(port), "i_love_ai"],
        cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).close()
                break
            except OSError:
                time.sleep(0.1)
        result = asyncio.run(measure(port, server.pid, args.students))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"machine: {platform.machine()}, CPython {platform.python_version()}, {os.cpu_count()} cores; "
          f"{args.students} students, i_love_ai at 120×40")
    print(f"start-up, one student at a time: median {result['startup_median_s']:.2f} s (websocket open -> first frame)")
    print(f"a class arriving at once ({args.students}): the last first frame after {result['burst_last_s']:.2f} s")
    print(f"memory per student: RSS {result['rss_per_student_mib']:.1f} MiB, PSS {result['pss_per_student_mib']:.1f} MiB"
          f" ({result['processes_per_student']:.0f} process(es) each)")
    print(f"the server itself: RSS {result['server_rss_mib']:.1f} MiB, PSS {result['server_pss_mib']:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
