"""``--export markdown`` of a 300-head scenario: CPU seconds, beside ``--check`` of the same file in the same run.

Run ``python benchmarks/markdown_heads.py`` (``--json`` for machines, ``--rounds N``, ``--heads H``). The
scenario is generated, never shipped: 8 causal tokens, d_model 8, H heads of d_k 4 in [attention] form, with a
pre-norm, QK-norm and RoPE, so every stage of a modern head is worked. The page works every head's first rows,
so its cost grows with the heads. Each round runs the check and the export alternately, in this process (so
neither pays for imports twice), and times CPU, not the wall clock: a noisy shared machine moves both alike,
and the ratio to the check is what to compare between versions. Each figure is the median of the rounds.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def scenario(heads: int, tokens: int = 8, d_model: int = 8, d_k: int = 4, seed: int = 0) -> str:
    import numpy as np

    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int) -> str:
        return "[" + ", ".join("[" + ", ".join(repr(v) for v in row) + "]"
                               for row in np.round(rng.uniform(-1, 1, (rows, cols)), 2).tolist()) + "]"

    names = ", ".join(f'"t{i}"' for i in range(tokens))
    return "\n".join([
        f'title = "{heads} heads"', f"tokens = [{names}]", f"X = {mat(tokens, d_model)}", 'mask = "causal"',
        "[norm]", 'kind = "rms"', "[qk_norm]", 'over = "head"', "[rope]", "base = 10000.0", 'layout = "half"',
        "[attention]", f"num_heads = {heads}", f"W_Q = {mat(d_model, heads * d_k)}",
        f"W_K = {mat(d_model, heads * d_k)}", f"W_V = {mat(d_model, heads * d_k)}",
        "[output]", f"W_O = {mat(heads * d_k, d_model)}", "",
    ])


def cpu(*args: str) -> float:
    from qkv_tui.edges.cli import main

    out = io.StringIO()
    t0 = time.process_time()
    with redirect_stdout(out):
        code = main(list(args))
    spent = time.process_time() - t0
    assert code == 0 and out.getvalue(), f"{args} exited {code}"
    return spent


def measure(heads: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"heads{heads}.toml"
        path.write_text(scenario(heads), encoding="utf-8")
        cpu("--check", str(path))  # imports and first-use caches, outside the figures
        checks: list[float] = []
        pages: list[float] = []
        for _ in range(rounds):
            checks.append(cpu("--check", str(path)))
            pages.append(cpu("--export", "markdown", str(path)))
    check, page = statistics.median(checks), statistics.median(pages)
    return {"heads": heads, "rounds": rounds, "check_cpu_s": check, "markdown_cpu_s": page,
            "markdown_vs_check": page / check if check else float("inf")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.heads, args.rounds)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"--export markdown, {result['heads']} heads: {result['markdown_cpu_s']:.2f} s CPU (median of"
              f" {result['rounds']}); --check of the same file {result['check_cpu_s']:.3f} s:"
              f" {result['markdown_vs_check']:.0f}× the check")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
