"""``--tensors``, ``--compare`` and their options on the command line: how the parser offers them and where
they go. Apart from the comparison itself (edges/compare.py), which loads only when one of them is given."""

from __future__ import annotations

import argparse

import numpy as np

from qkv_tui.core.tolerances import ATOL, RTOL


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("your own implementation, checked (docs/my-attention-is-wrong.md)")
    group.add_argument("--tensors", metavar="FILE",
                       help="build the scenario from your arrays (.npz, .safetensors or .pt): X with W_Q, W_K, W_V"
                            " (optional W_O, mask), or Q, K, V")
    group.add_argument("--layout", choices=("torch", "math"),
                       help="--tensors: weights as nn.Linear stores them (torch: out × in) or as x·W (math: in × out);"
                            " default: what the shapes allow")
    group.add_argument("--batch", metavar="N", type=int,
                       help="--tensors: which sequence of a batch (from 0; default 0)")
    group.add_argument("--compare", metavar="FILE",
                       help="hold your scores, scaled, weights/attn, output/out against the right ones; with"
                            " --export json the report is its \"compare\" member (exit 0: all agree, 1: not)")
    group.add_argument("--rtol", type=float, help=f"--compare: relative tolerance (default {RTOL:g})")
    group.add_argument("--atol", type=float, help=f"--compare: absolute tolerance (default {ATOL:g})")


def misplaced(args: argparse.Namespace) -> str | None:
    """The parser's error line for these options where they do nothing or cannot go; None when they fit."""
    if args.tensors is None:
        for flag in ("layout", "batch"):
            if getattr(args, flag) is not None:
                return f"--{flag} goes with --tensors FILE"
    elif args.scenario:
        return "give --tensors FILE or a SCENARIO, not both"
    elif args.serve:
        return "--tensors goes with the app, --export or --check, not --serve"
    elif getattr(args, "model", None) is not None:
        return "give --tensors FILE or --model SOURCE, not both"
    if args.compare is None:
        for flag in ("rtol", "atol"):
            if getattr(args, flag) is not None:
                return f"--{flag} goes with --compare FILE"
    else:
        if args.check or args.serve or (args.export is not None and args.export != "json"):
            return "--compare goes with the app or --export json"
        for flag in ("rtol", "atol"):
            value = getattr(args, flag)
            if value is not None and not (value >= 0 and np.isfinite(value)):
                return f"--{flag} {value}: expected a number >= 0"
    if args.batch is not None and args.batch < 0:
        return f"--batch {args.batch}: expected a sequence's index from 0"
    return None
