"""Where the test suite's time goes, measured per test and per tier, and what its order costs under xdist.

Record (a pytest plugin; each xdist worker writes its own file):

    QKV_SUITE_TIME=/tmp/run python -m pytest -q -p no:cacheprovider -p benchmarks.suite_time -n 2 [-m ...]

Each test's wall time and the worker's CPU time over it (setup, call and teardown) go to /tmp/run.<worker>.jsonl.
On a machine shared with other work the wall times swell with the load (eight sessions on two cores made them
5-10 times the CPU times); the CPU times do not, so they are what to compare between runs.

Summarise (per tier, the longest tests, and two workers scheduled greedily from the measured CPU times, in
collection order and with the heavy tiers first as tests/conftest.py orders them):

    python -m benchmarks.suite_time /tmp/run.*.jsonl
"""

from __future__ import annotations

import heapq
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Generator, Iterable
from pathlib import Path

import pytest

_out = None


def pytest_configure(config: pytest.Config) -> None:
    global _out
    base = os.environ.get("QKV_SUITE_TIME")
    controller = config.pluginmanager.hasplugin("dsession") and "PYTEST_XDIST_WORKER" not in os.environ
    if base and not controller:
        _out = open(f"{base}.{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl", "a", encoding="utf-8")  # noqa: SIM115


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    wall, cpu = time.time(), time.process_time()
    yield
    if _out is not None:
        tiers = sorted(m.name for m in item.iter_markers() if m.name in ("app", "slow", "snapshot"))
        _out.write(json.dumps({"id": item.nodeid, "start": wall, "wall": time.time() - wall,
                               "cpu": time.process_time() - cpu, "kw": tiers}) + "\n")
        _out.flush()


def makespan(durations: Iterable[float], workers: int = 2) -> float:
    """When the last of `workers` ends, each taking the next test as soon as it is free (xdist's worksteal does about this)."""
    ends = [0.0] * workers
    for d in durations:
        heapq.heapreplace(ends, ends[0] + d)
    return max(ends)


def summarise(paths: list[str]) -> None:
    rows = [json.loads(line) for path in paths for line in Path(path).read_text(encoding="utf-8").splitlines()]
    rows.sort(key=lambda r: (r["id"].split("::")[0], r["start"]))  # about collection order: files, then as run
    tiers: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for r in rows:
        tier = "+".join(r["kw"]) or "quick"
        tiers[tier] += r["cpu"]
        counts[tier] += 1
    print(f"{len(rows)} tests, CPU {sum(r['cpu'] for r in rows):.0f} s, wall {sum(r['wall'] for r in rows):.0f} s")
    for tier, cpu in tiers.most_common():
        print(f"  {tier:20} {counts[tier]:5} tests  CPU {cpu:7.1f} s")
    print("longest (CPU s):")
    for r in sorted(rows, key=lambda r: -r["cpu"])[:15]:
        print(f"  {r['cpu']:6.2f}  {r['id']}")
    cpu = [r["cpu"] for r in rows]
    heavy = sorted(rows, key=lambda r: 2 - (("app" in r["kw"] or "snapshot" in r["kw"]) + ("slow" in r["kw"])))
    print(f"two workers, collection order: {makespan(cpu):.0f} s; heavy tiers first: {makespan(r['cpu'] for r in heavy):.0f} s;"
          f" the floor (CPU / 2): {sum(cpu) / 2:.0f} s")


if __name__ == "__main__":
    summarise(sys.argv[1:])
