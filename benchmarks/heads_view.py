"""The heads view (v) with 16 heads of 128 tokens: CPU per arrow keypress, beside a trace step in the same run.

Run ``python benchmarks/heads_view.py`` (``--json`` for machines, ``--presses N``, ``--size 200x60``). The
scenario is generated (bench.generated_scenario: 128 tokens, causal, 16 heads), never shipped. Keys go in as a
terminal driver sends them (bench.step_cpu's way); each figure is the median CPU seconds of one keypress and
the frame it causes. The arrows and the trace's → alternate in rounds, so a noisy machine moves both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import generated_scenario

TOKENS, HEADS = 128, 16


async def measure(scenario: str, presses: int, size: tuple[int, int]) -> dict[str, Any]:
    from textual import events

    from qkv_tui.ui.app import QKVApp

    app = QKVApp(scenario)

    async def press(key: str) -> float:
        t0 = time.process_time()
        app.post_message(events.Key(key, None))
        await asyncio.sleep(1 / 20)  # the key is handled and the next frame drawn
        return time.process_time() - t0

    arrows: list[float] = []
    steps: list[float] = []
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        await press("5")  # the trace in Softmax, over 128 tokens
        await pilot.pause()
        t0 = time.process_time()
        await press("v")
        while app.modes.view != "heads":  # the first opening builds the maps: wait for it, counting its CPU
            await asyncio.sleep(1 / 20)
        await pilot.pause()
        opened = time.process_time() - t0
        for _ in range(5):  # from a head in the middle: neither end greys a key out (a footer rebuild)
            await press("right")
        for round_ in range(presses):
            arrows.append(await press("right" if round_ % 4 < 2 else "left"))
            arrows.append(await press("down" if round_ % 2 == 0 else "up"))
        await press("v")
        for _ in range(presses):
            steps.append(await press("right"))
        assert app.modes.view == "trace" and app.position.index > 0, "the keys were not handled"
    arrow, step = statistics.median(arrows), statistics.median(steps)
    return {"tokens": TOKENS, "heads": HEADS, "size": f"{size[0]}x{size[1]}", "presses": len(arrows),
            "open_ms": opened * 1e3, "arrow_cpu_ms": arrow * 1e3, "step_cpu_ms": step * 1e3,
            "arrow_vs_step": arrow / step if step else float("inf")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presses", type=int, default=40)
    parser.add_argument("--size", default="120x40", help="the terminal, WIDTHxHEIGHT (default 120x40)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "heads16x128.toml"
        path.write_text(generated_scenario(TOKENS, d_model=32, d_k=4, heads=HEADS), encoding="utf-8")
        result = asyncio.run(measure(str(path), args.presses, (width, height)))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"heads view, {HEADS} heads of {TOKENS} tokens at {result['size']}: v opens in {result['open_ms']:.1f} ms CPU;"
              f" an arrow {result['arrow_cpu_ms']:.2f} ms CPU (median of {result['presses']}), a trace step"
              f" {result['step_cpu_ms']:.2f} ms: {result['arrow_vs_step']:.2f}× a step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
