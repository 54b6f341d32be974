"""qkv-tui against bare Textual: start-up, CPU per step, memory, and the core's own cost.

Run ``python benchmarks/bench.py`` (``--json`` for machines, ``--quick`` for a smoke run).
Every figure is a median over repeated runs, and the two programs compared are run
alternately in the same session, so a noisy shared machine moves both alike; the
ratios are what the targets are stated in.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIZES = (16, 64, 256, 512)
CORE_SIZES = (512, 2048)
TARGETS = {
    "startup_vs_bare": 1.3,
    "startup_vs_bare_numpy": 1.2,
    "step_cpu_vs_bare": 4.0,
    "startup_512_vs_3": 2.0,
    "step_cpu_512_vs_3": 1.5,
    "rss_512_vs_3": 2.0,
}


# --- the programs measured ------------------------------------------------------------


def generated_scenario(n: int, d_model: int = 64, d_k: int = 16, heads: int = 4, seed: int = 0) -> str:
    """A causal scenario of n tokens with small integer weights, as TOML text."""
    import numpy as np  # not at the top: the bare app's start-up must not pay for NumPy

    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int) -> str:
        return "[" + ",".join("[" + ",".join(map(str, row)) + "]" for row in rng.integers(-2, 3, (rows, cols)).tolist()) + "]"

    tokens = ",".join(f'"t{i}"' for i in range(n))
    lines = [f'title = "generated {n}"', f"tokens = [{tokens}]", f"X = {mat(n, d_model)}", 'mask = "causal"',
             "[attention]", f"num_heads = {heads}"]
    lines += [f"{role} = {mat(d_model, heads * d_k)}" for role in ("W_Q", "W_K", "W_V")]
    return "\n".join(lines) + "\n"


# 32 tokens for glassllm:en (its tokenizer adds no special tokens)
MODEL_TEXT = "Alice was beginning to get very tired of sitting by her sister on the bank, and of having nothing to do"


def model_scenario(folder: Path) -> str | None:
    """A glassllm head on a 32-token sentence, as a scenario file; None where glassllm is not installed."""
    try:
        import glassllm  # noqa: F401
    except ImportError:
        return None
    path = folder / "glassllm32.toml"
    path.write_text(f'[model]\nsource = "glassllm:en"\ntext = "{MODEL_TEXT}"\nlayer = 1\nheads = [0]\n')
    return str(path)


def bare_app() -> Any:
    from textual.app import App, ComposeResult
    from textual.widgets import Static

    class Bare(App[None]):
        """The floor: one Static, and a key that updates it."""

        BINDINGS = [("right", "step", "step")]  # noqa: RUF012 - Textual's own idiom
        count = 0

        def compose(self) -> ComposeResult:
            yield Static("step 0", id="text")

        def action_step(self) -> None:
            self.count += 1
            self.query_one("#text", Static).update(f"step {self.count}")

    return Bare()


def qkv_app(scenario: str) -> Any:
    from qkv_tui.ui.app import QKVApp

    return QKVApp(scenario)


async def leave(pilot: Any) -> None:
    await pilot.pause()  # let the first frame be composed and drawn
    pilot.app.exit()


def command(scenario: str) -> None:
    """``qkv-tui SCENARIO`` as typed, through the command line's own main (its parser, its options' modules,
    loading and checking the file), its app run headless at 120×40 and left at its first complete frame. The
    only differences from a terminal: the terminal check is told there is one, and ``App.run`` runs headless."""
    from qkv_tui.edges import cli

    cli.terminal_problem = lambda: None  # the benchmark's standard streams are pipes; Textual runs headless
    from textual.app import App  # the app would import it a moment later: the same modules, loaded earlier

    run = App.run

    def headless(self: Any, *_args: Any, **_kwargs: Any) -> Any:
        return run(self, headless=True, size=(120, 40), auto_pilot=leave)

    App.run = headless  # type: ignore[method-assign]
    if cli.main([scenario]) != 0:
        raise SystemExit(f"qkv-tui {scenario} failed")


def child(program: str, scenario: str) -> None:
    """Start the program headless, leave at its first complete frame, report peak memory."""
    if program == "command":
        command(scenario)
    else:
        if program == "bare_numpy":  # the floor of any NumPy-based Textual app: the same app, NumPy imported
            import numpy  # noqa: F401
        app = bare_app() if program.startswith("bare") else qkv_app(scenario)
        app.run(headless=True, size=(120, 40), auto_pilot=leave)
    print(json.dumps({"rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def start_once(program: str, scenario: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", program, scenario],
                          capture_output=True, text=True, check=True)
    elapsed = time.perf_counter() - t0
    return elapsed, int(json.loads(done.stdout.strip().splitlines()[-1])["rss_kib"])


async def step_cpu(app: Any, presses: int, stages: tuple[str, ...] | None = None) -> float:
    """CPU seconds per step keypress, with the frame it causes (sleeping does not count as CPU).

    The key goes in as a terminal driver sends it, an event posted to the app; Pilot's own
    press() also visits every widget, which would bill the harness to the app under test.
    The qkv-tui presses are spread over its six stages (a digit jumps there, untimed), so a
    big scenario is not measured only in its first stage while a small one runs through all.
    """
    from textual import events

    async def press(key: str) -> float:
        t0 = time.process_time()
        app.post_message(events.Key(key, None))
        await asyncio.sleep(1 / 20)  # the key is handled and the next frame drawn
        return time.process_time() - t0

    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        samples = []
        keys = (stages or tuple(str(s) for s in range(1, 7))) if hasattr(app, "trace") else ("",)
        for i, stage in enumerate(keys):
            if stage:
                await press(stage)
            for _ in range(presses // len(keys) + (i < presses % len(keys))):
                samples.append(await press("right"))
                if stage and app.stepper.run_of(app.position.index).number != (int(stage) or 10):
                    await press(stage)  # stay in this stage: back to its start, untimed
        moved = app.position.index if hasattr(app, "position") else app.count
        assert moved, "the keys were not handled"
    return statistics.median(samples)


# --- the measurements --------------------------------------------------------------------


def measure(repeats: int, presses: int, sizes: tuple[int, ...], core_sizes: tuple[int, ...]) -> dict[str, Any]:
    import numpy as np

    from qkv_tui import compute
    from qkv_tui.core.scenario import parse_scenario
    from qkv_tui.teach.trace import Trace

    # an installed package runs from compiled bytecode; a source checkout may not have it yet
    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "qkv_tui"), quiet=1)

    tmp = Path(tempfile.mkdtemp(prefix="qkv-bench-"))
    scenarios = {3: "i_love_ai"}
    for n in sizes:
        path = tmp / f"gen{n}.toml"
        path.write_text(generated_scenario(n))
        scenarios[n] = str(path)

    programs = [("bare", "i_love_ai")] + [("qkv", scenarios[n]) for n in scenarios]
    model = model_scenario(tmp)
    if model is not None:  # command to first screen for a real model's head: tokenize, run layer 0, expand, draw
        programs.append(("qkv", model))
    bare_numpy = ("bare_numpy", "i_love_ai")  # started beside the others, but has no step or memory figure
    starts: dict[tuple[str, str], list[float]] = {p: [] for p in [*programs, bare_numpy]}
    rss: dict[tuple[str, str], list[int]] = {p: [] for p in [*programs, bare_numpy]}
    for _ in range(repeats):  # alternate the programs in every round
        for prog in [*programs, bare_numpy]:
            seconds, kib = start_once(*prog)
            starts[prog].append(seconds)
            rss[prog].append(kib)

    cpu: dict[tuple[str, str], list[float]] = {p: [] for p in programs}
    for _ in range(max(1, repeats // 2)):
        for prog in programs:
            app = bare_app() if prog[0] == "bare" else qkv_app(prog[1])
            cpu[prog].append(asyncio.run(step_cpu(app, presses)))

    def med(values: list[float] | list[int]) -> float:
        return float(statistics.median(values))

    bare = ("bare", "i_love_ai")
    base = ("qkv", "i_love_ai")
    rows = []
    for n, scenario in scenarios.items():
        prog = ("qkv", scenario)
        rows.append({
            "tokens": n,
            "startup_s": med(starts[prog]),
            "step_cpu_ms": med(cpu[prog]) * 1000,
            "rss_mib": med(rss[prog]) / 1024,
            "startup_vs_3": med(starts[prog]) / med(starts[base]),
            "step_cpu_vs_3": med(cpu[prog]) / med(cpu[base]),
            "rss_vs_3": med(rss[prog]) / med(rss[base]),
        })

    core = []
    for n in core_sizes:
        text = generated_scenario(n)
        times = {"load": [], "compute": [], "trace": [], "op": []}
        for _ in range(max(3, repeats)):
            t0 = time.perf_counter()
            sc = parse_scenario(text, f"gen{n}")
            t1 = time.perf_counter()
            comp = compute(sc)
            t2 = time.perf_counter()
            trace = Trace(comp)
            t3 = time.perf_counter()
            for i in np.random.default_rng(1).integers(0, len(trace), 200):
                trace.op(int(i))
            t4 = time.perf_counter()
            times["load"].append(t1 - t0)
            times["compute"].append(t2 - t1)
            times["trace"].append(t3 - t2)
            times["op"].append((t4 - t3) / 200)
        core.append({"tokens": n, "operations": len(trace), **{f"{k}_ms": med(v) * 1000 for k, v in times.items()}})

    ratios = {
        "startup_vs_bare": med(starts[base]) / med(starts[bare]),
        "startup_vs_bare_numpy": med(starts[base]) / med(starts[bare_numpy]),
        "step_cpu_vs_bare": med(cpu[base]) / med(cpu[bare]),
        "startup_512_vs_3": next((r["startup_vs_3"] for r in rows if r["tokens"] == 512), float("nan")),
        "step_cpu_512_vs_3": next((r["step_cpu_vs_3"] for r in rows if r["tokens"] == 512), float("nan")),
        "rss_512_vs_3": next((r["rss_vs_3"] for r in rows if r["tokens"] == 512), float("nan")),
    }
    model_row = None
    if model is not None:
        prog = ("qkv", model)
        model_row = {"tokens": 32, "startup_s": med(starts[prog]), "startup_vs_3": med(starts[prog]) / med(starts[base]),
                     "step_cpu_ms": med(cpu[prog]) * 1000, "rss_mib": med(rss[prog]) / 1024}
    by_size = {r["tokens"]: r for r in rows}
    if 64 in by_size and 512 in by_size:  # once the panes fill the screen, does the cost still grow with n?
        ratios["step_cpu_512_vs_64"] = by_size[512]["step_cpu_ms"] / by_size[64]["step_cpu_ms"]
    return {
        "machine": f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()},"
                   f" {__import__('os').cpu_count()} cores",
        "repeats": repeats,
        "presses": presses,
        "bare": {"startup_s": med(starts[bare]), "step_cpu_ms": med(cpu[bare]) * 1000, "rss_mib": med(rss[bare]) / 1024},
        "bare_numpy": {"startup_s": med(starts[bare_numpy])},
        "sizes": rows,
        "glassllm_head": model_row,
        "core": core,
        "ratios": ratios,
        "targets": TARGETS,
    }


COMMAND_SCENARIO = str(Path(__file__).resolve().parent.parent / "scenarios" / "i_love_ai.toml")


def start_timed(program: str, scenario: str, package: str | None = None) -> tuple[float, float]:
    """One start of ``program``: its wall time and the CPU time it used (user and system), in seconds; with
    ``package``, the qkv_tui found there (on PYTHONPATH) rather than this checkout's."""
    env = None if package is None else {**os.environ, "PYTHONPATH": package}
    t0 = time.perf_counter()
    child_process = subprocess.Popen([sys.executable, __file__, "--child", program, scenario], env=env,
                                     stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child_process.pid, 0)
    elapsed = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{program} {scenario} failed")
    return elapsed, usage.ru_utime + usage.ru_stime


def measure_startup(repeats: int, before: str | None = None) -> dict[str, Any]:
    """Only the start-up targets: ``qkv-tui scenarios/i_love_ai.toml`` (the command line, file and all) and
    the app class given I love AI, beside the bare app and the bare app that also imports NumPy, the four
    alternated in every round; no step or core figures. With ``before`` (a checkout of the code before a
    change), its command too, in the same rounds: a change measured against what it changed, under one load."""
    root = Path(__file__).resolve().parent.parent
    compileall.compile_dir(str(root / "qkv_tui"), quiet=1)
    programs = {"bare": None, "bare_numpy": None, "qkv": None, "command": None}
    if before is not None:
        compileall.compile_dir(str(Path(before) / "qkv_tui"), quiet=1)
        programs["command_before"] = str(Path(before).resolve())
    runs: dict[str, list[float]] = {program: [] for program in programs}
    cpu: dict[str, list[float]] = {program: [] for program in programs}
    for _ in range(repeats):
        for program, package in programs.items():
            kind = program.removesuffix("_before")
            seconds, used = start_timed(kind, COMMAND_SCENARIO if kind == "command" else "i_love_ai", package)
            runs[program].append(seconds)
            cpu[program].append(used)
    wall = {program: float(statistics.median(values)) for program, values in runs.items()}
    used_cpu = {program: float(statistics.median(values)) for program, values in cpu.items()}
    bare, bare_numpy, qkv, cmd = (wall[p] for p in ("bare", "bare_numpy", "qkv", "command"))
    return {"repeats": repeats, "bare_startup_s": bare, "bare_numpy_startup_s": bare_numpy, "qkv_startup_s": qkv,
            "command_startup_s": cmd, "startup_vs_bare": qkv / bare, "startup_vs_bare_numpy": qkv / bare_numpy,
            "command_vs_bare_numpy": cmd / bare_numpy, "cpu_s": used_cpu,
            "command_cpu_vs_bare_numpy": used_cpu["command"] / used_cpu["bare_numpy"],
            **({"command_before_startup_s": wall["command_before"],
                "command_before_vs_bare_numpy": wall["command_before"] / bare_numpy,
                "command_before_cpu_vs_bare_numpy": used_cpu["command_before"] / used_cpu["bare_numpy"]}
               if before is not None else {}),
            "load_average": list(os.getloadavg()),
            "target": TARGETS["startup_vs_bare"], "target_numpy": TARGETS["startup_vs_bare_numpy"], "runs": runs,
            "cpu_runs": cpu}


def measure_steps(rounds: int, presses: int) -> dict[str, Any]:
    """Only the CPU per step: the bare app, I love AI and the glassllm head (where installed), alternated in
    every round and no start-ups, so more rounds fit the same minutes (the figure a widget change moves)."""
    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "qkv_tui"), quiet=1)
    programs = {"bare": "i_love_ai", "qkv": "i_love_ai"}
    model = model_scenario(Path(tempfile.mkdtemp(prefix="qkv-bench-steps-")))
    if model is not None:
        programs["glassllm_head"] = model
    # learn_to_look's forward stages (1-6) beside its backward ones (7 Loss, 8 dMix, 9 dSoftmax, 0 dScale)
    programs["learn_to_look"] = programs["learn_to_look_backward"] = "learn_to_look"
    stages = {"learn_to_look_backward": ("7", "8", "9", "0")}
    runs: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(rounds):
        for name, scenario in programs.items():
            app = bare_app() if name == "bare" else qkv_app(scenario)
            runs[name].append(asyncio.run(step_cpu(app, presses, stages.get(name))) * 1000)
    medians = {name: float(statistics.median(ms)) for name, ms in runs.items()}
    return {"rounds": rounds, "presses": presses, "step_cpu_ms": medians, "runs_ms": runs,
            "step_cpu_vs_bare": medians["qkv"] / medians["bare"], "target": TARGETS["step_cpu_vs_bare"]}


def measure_linear(rounds: int, presses: int, n: int = 512) -> dict[str, Any]:
    """CPU per step of the same causal n-token scenario with its softmax and with [linear] in its place (both
    alternated in every round): linear attention's stages must cost no more per keypress than the softmax's."""
    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "qkv_tui"), quiet=1)
    folder = Path(tempfile.mkdtemp(prefix="qkv-bench-linear-"))
    softmax = folder / "softmax.toml"
    softmax.write_text(generated_scenario(n), encoding="utf-8")
    linear = folder / "linear.toml"
    linear.write_text(generated_scenario(n) + '[linear]\nfeature = "elu1"\n', encoding="utf-8")
    runs: dict[str, list[float]] = {"softmax": [], "linear": []}
    for _ in range(rounds):
        for name, path in (("softmax", softmax), ("linear", linear)):
            runs[name].append(asyncio.run(step_cpu(qkv_app(str(path)), presses)) * 1000)
    medians = {name: float(statistics.median(ms)) for name, ms in runs.items()}
    return {"tokens": n, "rounds": rounds, "presses": presses, "step_cpu_ms": medians, "runs_ms": runs,
            "linear_vs_softmax": medians["linear"] / medians["softmax"], "target": 1.0}


def report_linear(result: dict[str, Any]) -> str:
    ms = result["step_cpu_ms"]
    met = "yes" if result["linear_vs_softmax"] <= result["target"] else "NO"
    out = [f"CPU per step at {result['tokens']} tokens, medians of {result['rounds']} alternated runs of"
           f" {result['presses']} presses: softmax {ms['softmax']:.2f} ms, [linear] {ms['linear']:.2f} ms:"
           f" {result['linear_vs_softmax']:.2f}× (target ≤ {result['target']:.1f}×, met: {met})"]
    for name, values in result["runs_ms"].items():
        out.append(f"  {name:<8} " + " ".join(f"{v:6.2f}" for v in values))
    return "\n".join(out)


def report_steps(result: dict[str, Any]) -> str:
    ms = result["step_cpu_ms"]
    met = "yes" if result["step_cpu_vs_bare"] <= result["target"] else "NO"
    out = [f"CPU per step, medians of {result['rounds']} alternated runs of {result['presses']} presses:"
           f" bare Textual {ms['bare']:.2f} ms, qkv-tui (I love AI) {ms['qkv']:.2f} ms:"
           f" {result['step_cpu_vs_bare']:.2f}× (target {result['target']:.1f}×, met: {met})"]
    if "glassllm_head" in ms:
        out.append(f"glassllm:en layer 1 head 0, 32 tokens: {ms['glassllm_head']:.2f} ms per step")
    out.append(f"learn_to_look: a forward step {ms['learn_to_look']:.2f} ms, a backward step"
               f" {ms['learn_to_look_backward']:.2f} ms")
    for name, values in result["runs_ms"].items():
        out.append(f"  {name:<14} " + " ".join(f"{v:6.2f}" for v in values))
    return "\n".join(out)


async def train_cpu(presses: int) -> dict[str, float]:
    """CPU ms per keypress on learn_to_look: a forward step of the trace, a Train view step (l: one SGD step,
    its forward and backward pass computed at that press) and a step of FlashAttention-2's backward tiles (t)."""
    from textual import events

    from qkv_tui.teach.tiled import tiled
    from qkv_tui.ui.app import QKVApp

    app = QKVApp("learn_to_look")

    async def press(key: str) -> float:
        t0 = time.process_time()
        app.post_message(events.Key(key, None))
        await asyncio.sleep(1 / 20)
        return time.process_time() - t0

    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        forward = [await press("right") for _ in range(presses)]
        await press("l")
        train = [await press("right") for _ in range(app.presenter.side_steps(app.modes, 0) - 1)]
        assert app.modes.view == "train" and app.modes.side_step > 0, "the Train view's keys were not handled"
        await press("l")
        await press("t")
        forward_tiles = [await press("right") for _ in range(len(tiled(app.comp, 0)))]  # the forward's tiles
        tiles = [await press("right") for _ in range(presses)]
    return {name: float(statistics.median(v)) * 1000 for name, v in
            (("forward_step_ms", forward), ("train_step_ms", train), ("forward_tile_step_ms", forward_tiles),
             ("fa2_backward_step_ms", tiles))}


def measure_train(rounds: int, presses: int) -> dict[str, Any]:
    runs = [asyncio.run(train_cpu(presses)) for _ in range(rounds)]
    medians = {key: float(statistics.median(r[key] for r in runs)) for key in runs[0]}
    return {"rounds": rounds, "presses": presses, **medians,
            "train_vs_forward": medians["train_step_ms"] / medians["forward_step_ms"],
            "fa2_backward_vs_forward": medians["fa2_backward_step_ms"] / medians["forward_step_ms"]}


def report_train(r: dict[str, Any]) -> str:
    return (f"learn_to_look, CPU per keypress, medians of {r['rounds']} runs: forward trace step"
            f" {r['forward_step_ms']:.2f} ms; Train view SGD step {r['train_step_ms']:.2f} ms"
            f" ({r['train_vs_forward']:.2f}×); forward tile step {r['forward_tile_step_ms']:.2f} ms;"
            f" FA2 backward tile step {r['fa2_backward_step_ms']:.2f} ms"
            f" ({r['fa2_backward_vs_forward']:.2f}×)")


def report_startup(result: dict[str, Any]) -> str:
    met = "yes" if result["startup_vs_bare"] <= result["target"] else "NO"
    met_numpy = "yes" if result["startup_vs_bare_numpy"] <= result["target_numpy"] else "NO"
    met_command = "yes" if result["command_vs_bare_numpy"] <= result["target_numpy"] else "NO"
    return (f"start-up, medians of {result['repeats']} alternated runs: bare Textual {result['bare_startup_s']:.3f} s,"
            f" bare Textual + NumPy {result['bare_numpy_startup_s']:.3f} s,"
            f" qkv-tui (I love AI) {result['qkv_startup_s']:.3f} s:"
            f" {result['startup_vs_bare']:.2f}× bare (target {result['target']:.1f}×, met: {met}),"
            f" {result['startup_vs_bare_numpy']:.2f}× bare + NumPy (target {result['target_numpy']:.1f}×, met: {met_numpy});"
            f" the command qkv-tui scenarios/i_love_ai.toml {result['command_startup_s']:.3f} s:"
            f" {result['command_vs_bare_numpy']:.2f}× bare + NumPy (target {result['target_numpy']:.1f}×, met: {met_command});"
            f" its CPU time {result['cpu_s']['command']:.3f} s against {result['cpu_s']['bare_numpy']:.3f} s:"
            f" {result['command_cpu_vs_bare_numpy']:.2f}×;"
            + (f" the command before the change {result['command_before_startup_s']:.3f} s:"
               f" {result['command_before_vs_bare_numpy']:.2f}× (CPU time {result['cpu_s']['command_before']:.3f} s:"
               f" {result['command_before_cpu_vs_bare_numpy']:.2f}×);" if "command_before_startup_s" in result else "")
            + f" load average {' '.join(f'{x:.2f}' for x in result['load_average'])} at the end")


# --- the command line at scale: --export json and --check of large files ---------------


def full_precision_scenario(n: int, d_model: int, seed: int = 0) -> str:
    """n tokens x d_model of random normals written with repr (about 20 characters a number),
    as an exporter writing every float64 in full would: the large-file case for --check."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int) -> str:
        rows_text = ("  [" + ", ".join(map(repr, row)) + "]" for row in rng.standard_normal((rows, cols)).tolist())
        return "[\n" + ",\n".join(rows_text) + "\n]"

    tokens = ", ".join(f'"t{i}"' for i in range(n))
    head = "\n".join(f"{role} = {mat(d_model, 32)}" for role in ("W_Q", "W_K", "W_V"))
    return f'title = "full precision {n}"\ntokens = [{tokens}]\nX = {mat(n, d_model)}\nmask = "causal"\n[[heads]]\n{head}\n'


def run_measured(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one child process; its stdout is discarded."""
    import os

    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            raise RuntimeError(f"{argv} exited {proc.returncode}: {err.read().decode()[-500:]}")
    return elapsed, usage.ru_maxrss / 1024  # Linux reports KiB


def measure_cli(repeats: int, quick: bool) -> dict[str, Any]:
    """--export json of a 2,048-token, 4-head scenario and --check of a 45 MB file, each beside
    a baseline in the same run: for the export, loading and computing the scenario (the floor
    any export pays); for the check, tomllib alone reading the same file (the old loader's core)."""
    tmp = Path(tempfile.mkdtemp(prefix="qkv-bench-cli-"))
    n_export, (n_check, d_check) = (256, (512, 128)) if quick else (2048, (4096, 512))
    export_file = tmp / f"gen{n_export}.toml"
    export_file.write_text(generated_scenario(n_export))
    check_file = tmp / f"full{n_check}.toml"
    check_file.write_text(full_precision_scenario(n_check, d_check))
    py = sys.executable
    floor = f"from qkv_tui import compute, load_scenario; compute(load_scenario({str(export_file)!r}))"
    tomllib_only = f"import tomllib; tomllib.loads(open({str(check_file)!r}, encoding='utf-8').read())"
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in ("export", "floor", "check", "tomllib")}
    for _ in range(repeats):  # alternate measured and baseline runs, as the rest of the benchmark does
        runs["export"].append(run_measured([py, "-m", "qkv_tui", "--export", "json", str(export_file)]))
        runs["floor"].append(run_measured([py, "-c", floor]))
        runs["check"].append(run_measured([py, "-m", "qkv_tui", "--check", str(check_file)]))
        runs["tomllib"].append(run_measured([py, "-c", tomllib_only]))

    def med(key: str, i: int) -> float:
        return float(statistics.median(r[i] for r in runs[key]))

    largest_mib = n_export * n_export * 8 / 2**20  # one n x n float64 matrix
    return {
        "export_tokens": n_export, "export_heads": 4, "largest_matrix_mib": largest_mib,
        "check_file_mb": check_file.stat().st_size / 1e6, "check_shape": [n_check, d_check],
        **{f"{k}_s": med(k, 0) for k in runs}, **{f"{k}_rss_mib": med(k, 1) for k in runs},
        "repeats": repeats,
    }


def report_cli(cli: dict[str, Any]) -> str:
    out = [f"command line at scale (medians of {cli['repeats']} runs; peak RSS of the process)"]
    out.append(f"  --export json, {cli['export_tokens']} tokens x {cli['export_heads']} heads:"
               f" {cli['export_s']:.1f} s, {cli['export_rss_mib']:.0f} MiB"
               f" (load + compute alone: {cli['floor_s']:.1f} s, {cli['floor_rss_mib']:.0f} MiB;"
               f" one {cli['export_tokens']}x{cli['export_tokens']} matrix: {cli['largest_matrix_mib']:.0f} MiB)")
    out.append(f"  --check, {cli['check_file_mb']:.0f} MB file ({cli['check_shape'][0]} x {cli['check_shape'][1]} X,"
               f" full precision): {cli['check_s']:.1f} s, {cli['check_rss_mib']:.0f} MiB"
               f" (tomllib alone reading it: {cli['tomllib_s']:.1f} s, {cli['tomllib_rss_mib']:.0f} MiB)")
    return "\n".join(out)


# --- the side views at scale: time to the first screen of k and t, and their memory -----------


VIEW_KEYS = ("k", "t")  # the KV-cache view and FlashAttention's tiles


def view_child(scenario: str, key: str) -> None:
    """Open the app at 120×40, press End, then time a few trace steps (the baseline), then the
    view's key until its first screen is drawn, then steps inside the view; print JSON."""

    async def run() -> dict[str, float]:
        from qkv_tui.ui.app import QKVApp

        app = QKVApp(scenario)

        async def timed(k: str) -> float:
            t0 = time.perf_counter()
            await pilot.press(k)
            await pilot.pause()
            return time.perf_counter() - t0

        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await timed("end")
            trace = [await timed(k) for k in ("left", "right") * 3]
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            first = await timed(key)
            inside = [await timed("right") for _ in range(6)]
            assert app.modes.side and app.modes.side_step > 0, "the view's keys were not handled"
            after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return {"trace_step_s": statistics.median(trace), "first_s": first, "view_step_s": statistics.median(inside),
                "rss_before_mib": before / 1024, "rss_after_mib": after / 1024}

    print(json.dumps(asyncio.run(run())))


def measure_views(repeats: int, quick: bool) -> dict[str, Any]:
    """Each (scenario, view) in its own process, so peak RSS is that view's; alternated in every round."""
    tmp = Path(tempfile.mkdtemp(prefix="qkv-bench-views-"))
    n = 256 if quick else 2048
    big = tmp / f"gen{n}.toml"
    big.write_text(generated_scenario(n))
    runs: dict[tuple[int, str], list[dict[str, float]]] = {(t, k): [] for t in (3, n) for k in VIEW_KEYS}
    for _ in range(repeats):
        for tokens, scenario in ((3, "i_love_ai"), (n, str(big))):
            for key in VIEW_KEYS:
                done = subprocess.run([sys.executable, __file__, "--view-child", scenario, key],
                                      capture_output=True, text=True, check=True)
                runs[(tokens, key)].append(json.loads(done.stdout.strip().splitlines()[-1]))
    rows = []
    for (tokens, key), samples in runs.items():
        row = {"tokens": tokens, "heads": 4 if tokens == n else 1, "view": key}
        for field in samples[0]:
            row[field] = float(statistics.median(s[field] for s in samples))
        base = runs[(3, key)]
        row["first_vs_trace_step"] = row["first_s"] / row["trace_step_s"]
        row["first_vs_3"] = row["first_s"] / float(statistics.median(s["first_s"] for s in base))
        rows.append(row)
    return {"repeats": repeats, "views": rows}


def report_views(views: dict[str, Any]) -> str:
    out = [f"side views, End then the key, 120x40 (medians of {views['repeats']} processes each)",
           f"{'tokens':>6} {'heads':>5} {'view':>4} {'trace step s':>12} {'first screen s':>14} {'×step':>7}"
           f" {'×3-tok':>7} {'view step s':>11} {'RSS MiB before → after':>23}"]
    for r in views["views"]:
        out.append(f"{r['tokens']:>6} {r['heads']:>5} {r['view']:>4} {r['trace_step_s']:>12.3f} {r['first_s']:>14.3f}"
                   f" {r['first_vs_trace_step']:>7.1f} {r['first_vs_3']:>7.1f} {r['view_step_s']:>11.3f}"
                   f" {r['rss_before_mib']:>11.0f} → {r['rss_after_mib']:<9.0f}")
    return "\n".join(out)


def report(result: dict[str, Any]) -> str:
    out = [f"machine: {result['machine']}; medians of {result['repeats']} start-ups, "
           f"{result['presses']} step presses per run", ""]
    bare = result["bare"]
    out.append(f"bare Textual app (one Static): start-up {bare['startup_s']:.3f} s, "
               f"CPU per keypress {bare['step_cpu_ms']:.2f} ms, peak RSS {bare['rss_mib']:.1f} MiB")
    out.append(f"bare Textual app that also imports NumPy: start-up {result['bare_numpy']['startup_s']:.3f} s")
    out.append("")
    out.append(f"{'tokens':>6} {'start-up s':>10} {'×3-tok':>7} {'CPU/step ms':>11} {'×3-tok':>7} {'RSS MiB':>8} {'×3-tok':>7}")
    for r in result["sizes"]:
        out.append(f"{r['tokens']:>6} {r['startup_s']:>10.3f} {r['startup_vs_3']:>7.2f} {r['step_cpu_ms']:>11.2f}"
                   f" {r['step_cpu_vs_3']:>7.2f} {r['rss_mib']:>8.1f} {r['rss_vs_3']:>7.2f}")
    model = result.get("glassllm_head")
    if model:
        out.append(f"glassllm:en layer 1 head 0, {model['tokens']} tokens: command to first screen {model['startup_s']:.3f} s"
                   f" (×{model['startup_vs_3']:.2f} of I love AI), CPU per step {model['step_cpu_ms']:.2f} ms,"
                   f" peak RSS {model['rss_mib']:.1f} MiB")
    out.append("")
    out.append(f"{'core':>6} {'operations':>12} {'load ms':>9} {'compute ms':>11} {'trace ms':>9} {'one op ms':>10}")
    for c in result["core"]:
        out.append(f"{c['tokens']:>6} {c['operations']:>12,} {c['load_ms']:>9.1f} {c['compute_ms']:>11.1f}"
                   f" {c['trace_ms']:>9.3f} {c['op_ms']:>10.3f}")
    out.append("")
    out.append("target                      measured   target  met")
    for key, target in result["targets"].items():
        value = result["ratios"][key]
        out.append(f"{key:<26} {value:>9.2f}× {target:>6.1f}×  {'yes' if value <= target else 'NO'}")
    if "step_cpu_512_vs_64" in result["ratios"]:
        flat = result["ratios"]["step_cpu_512_vs_64"]
        out.append(f"{'step_cpu_512_vs_64':<26} {flat:>9.2f}×  (no target: the cost once panes fill the screen)")
    return "\n".join(out)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) == 4 and sys.argv[1] == "--view-child":
        view_child(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--quick", action="store_true", help="few repeats and sizes: a smoke run, not figures to quote")
    parser.add_argument("--repeats", type=int, default=9, help="start-ups per program (default 9)")
    parser.add_argument("--presses", type=int, default=100, help="step presses per run (default 100)")
    parser.add_argument("--cli-only", action="store_true", help="only the command line at scale (minutes, not the app)")
    parser.add_argument("--cli-repeats", type=int, default=3, help="runs of each command-line measurement (default 3)")
    parser.add_argument("--views-only", action="store_true",
                        help="only the KV-cache and tiled views opened at 2,048 tokens beside 3 (minutes)")
    parser.add_argument("--model-only", action="store_true",
                        help="only the glassllm head beside I love AI and the bare app")
    parser.add_argument("--step-only", action="store_true",
                        help="only the CPU per step of the bare app, I love AI and the glassllm head,"
                             " --repeats alternated rounds (no start-ups)")
    parser.add_argument("--linear-only", action="store_true",
                        help="only the CPU per step of a 512-token scenario with its softmax and with [linear],"
                             " --repeats alternated rounds")
    parser.add_argument("--train-only", action="store_true",
                        help="only learn_to_look's CPU per keypress: a forward step, a Train view step (l),"
                             " an FA2 backward tile step (t); --repeats runs")
    parser.add_argument("--startup-only", action="store_true",
                        help="only start-up of I love AI beside the bare app and the bare app with NumPy (seconds, not minutes)")
    parser.add_argument("--before", metavar="CHECKOUT",
                        help="--startup-only: also the command with the qkv_tui of CHECKOUT (the code before a change,"
                             " as `git worktree add --detach DIR COMMIT` makes it), in the same rounds")
    args = parser.parse_args()
    quick = (2, 10, (16,), (512,))
    result: dict[str, Any] = {}
    repeats = 2 if args.quick else args.repeats
    alone: tuple[tuple[bool, Callable[[], dict[str, Any]], Callable[[dict[str, Any]], str]], ...] = (
        (args.startup_only, lambda: measure_startup(repeats, args.before), report_startup),
        (args.linear_only, lambda: measure_linear(repeats, args.presses), report_linear),
        (args.train_only, lambda: measure_train(repeats, min(args.presses, 20)), report_train),
        (args.step_only, lambda: measure_steps(repeats, args.presses), report_steps))
    for chosen, run, text in alone:  # each --*-only flag measures one thing alone and prints it
        if chosen:
            result = run()
            print(json.dumps(result, indent=2) if args.json else text(result))
            return
    if args.model_only:
        result = measure(args.repeats, args.presses, (), ())
        print(json.dumps(result, indent=2) if args.json else "\n\n".join(report(result).split("\n\n")[:3]))
        return
    if args.views_only:
        result["views"] = measure_views(1 if args.quick else args.cli_repeats, args.quick)
        print(json.dumps(result, indent=2) if args.json else report_views(result["views"]))
        return
    if not args.cli_only:
        result = measure(*quick) if args.quick else measure(args.repeats, args.presses, SIZES, CORE_SIZES)
        result["views"] = measure_views(1 if args.quick else args.cli_repeats, args.quick)
    result["cli"] = measure_cli(1 if args.quick else args.cli_repeats, args.quick)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        parts = [] if args.cli_only else [report(result), report_views(result["views"])]
        print("\n\n".join([*parts, report_cli(result["cli"])]))


if __name__ == "__main__":
    main()
