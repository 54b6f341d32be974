"""``--model SOURCE --text TEXT [--layer L] [--heads H,H]``: a real model's head without writing a file.

The options become the same ``[model]`` table a scenario file would hold (README, "A real model's head"), parsed by
the same loader, so every message and every check is the file's. A relative folder is found from
the current directory.
"""

from __future__ import annotations

import argparse

from qkv_tui.base.values import escaped
from qkv_tui.core.scenario import Scenario, parse_scenario
from qkv_tui.edges.export_toml import string


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("a real model's head")
    group.add_argument("--model", metavar="SOURCE", help="glassllm:en, glassllm:pt, a Hugging Face folder, a .gguf file,"
                       " hf:ORG/NAME or ollama:NAME[:TAG], instead of SCENARIO")
    group.add_argument("--text", metavar="TEXT", help="the sentence to run through the model")
    group.add_argument("--layer", metavar="L", type=_whole, help="0-based layer (default 0)")
    group.add_argument("--heads", metavar="H,H", type=_heads, help="0-based query heads, in this order (default: every head)")


def wants_model(args: argparse.Namespace) -> bool:
    return any(getattr(args, key) is not None for key in ("model", "text", "layer", "heads"))


def problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, for the parser's own error line; None when they make a [model] table."""
    if args.model is None:
        return "--text, --layer and --heads go with --model SOURCE"
    if args.text is None:
        return '--model needs --text "the sentence to run through the model"'
    if args.scenario:
        return "give either SCENARIO or --model, not both"
    if getattr(args, "serve", False):  # each browser tab loads the scenario again, from a file
        return "--serve needs a SCENARIO file; write the head to one first (--export toml > head.toml)"
    return None


def model_scenario(args: argparse.Namespace) -> Scenario:
    """The scenario the options describe; raises ScenarioError like any file."""
    lines = ["[model]", f"source = {string(args.model)}", f"text = {string(args.text)}"]
    if args.layer is not None:
        lines.append(f"layer = {args.layer}")
    if args.heads is not None:
        lines.append(f"heads = [{', '.join(map(str, args.heads))}]")
    title = f"{escaped(args.model)} · layer {args.layer or 0}"  # a folder's name may hold a newline or an escape
    return parse_scenario("\n".join(lines) + "\n", args.model, default_title=title)


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _heads(text: str) -> list[int]:
    return [_whole(part.strip()) for part in text.split(",")]
