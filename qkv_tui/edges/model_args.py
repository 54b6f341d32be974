"""``--model SOURCE --text TEXT [--layer L] [--heads H,H]``: a real model's head without writing a file.

The options become the same ``[model]`` table a scenario file would hold (docs/real-models.md), parsed by
the same loader, so every message and every check is the file's. A relative folder is found from
the current directory.
"""

from __future__ import annotations

import argparse
import re

from qkv_tui.base.values import escaped
from qkv_tui.core.scenario import Scenario, ScenarioError, parse_scenario
from qkv_tui.core.toml_text import string


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("a real model's head")
    group.add_argument("--model", metavar="SOURCE", help="glassllm:en, glassllm:pt, a Hugging Face folder, a .gguf file,"
                       " hf:ORG/NAME or ollama:NAME[:TAG], instead of SCENARIO")
    group.add_argument("--text", metavar="TEXT", help="the sentence to run through the model")
    group.add_argument("--layer", metavar="L", type=_index, help="the layer, numbered from 0 as the model numbers it"
                       " (default 0)")
    group.add_argument("--heads", metavar="H,H", type=_heads, help="query heads, numbered from 0 as the model numbers"
                       " them, in this order (default: every head); on a worksheet of a SCENARIO, the heads the"
                       " sheet asks about, counted from 1 as --head counts")


def wants_model(args: argparse.Namespace) -> bool:
    return any(getattr(args, key) is not None for key in ("model", "text", "layer")) or (
        args.heads is not None and not sheet_heads(args))


def sheet_heads(args: argparse.Namespace) -> bool:
    """Whether --heads is a worksheet's choice of heads (1-based, edges/worksheet/select.py) rather than a model's:
    on a worksheet of a SCENARIO, where no model is named."""
    return bool(args.export == "worksheet" and args.model is None and args.text is None and args.layer is None)


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
    below = [head for head in args.heads or () if head < 0]
    if below:  # read as typed, so that a worksheet's --heads can say how it counts (sheet_heads)
        return f"argument --heads: {below[0]} is below 0; {COUNTING}"
    return None


def model_scenario(args: argparse.Namespace) -> Scenario:
    """The scenario the options describe; raises ScenarioError like any file."""
    lines = ["[model]", f"source = {string(args.model)}", f"text = {string(args.text)}"]
    if args.layer is not None:
        lines.append(f"layer = {args.layer}")
    if args.heads is not None:
        lines.append(f"heads = [{', '.join(map(str, args.heads))}]")
    title = f"{escaped(args.model)} · layer {args.layer or 0}"  # a folder's name may hold a newline or an escape
    try:
        return parse_scenario("\n".join(lines) + "\n", args.model, default_title=title)
    except ScenarioError as exc:
        raise ScenarioError(exc.source, _as_typed(exc.message)) from None


# the loader's line for a [model] layer or head the model lacks (importers/expand.py), said of the option typed
_OUT_OF_RANGE = re.compile(r"model\.(layer|heads)(?:\[\d+\])? = (-?\d+) is out of range; the model has ([\d,]+)"
                           r" (layers|heads), numbered 0 … (\d+)")
COUNTING = "--layer and --heads use the model's own numbers, from 0 (--head, the head in view, counts from 1)"


def _as_typed(message: str) -> str:
    if message.startswith("model.heads lists head "):
        return "--heads" + message.removeprefix("model.heads")
    found = _OUT_OF_RANGE.fullmatch(message)
    if found is None:
        return message
    flag, value, count, what, last = found.groups()
    return f"--{flag} {value} is out of range; the model has {count} {what}, numbered 0 … {last}: {COUNTING}"


def _index(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is below 0; {COUNTING}")
    return value


def _heads(text: str) -> list[int]:
    """Whole numbers as typed, a sign allowed: a model's (from 0) and a worksheet's (from 1) each check their range."""
    out = []
    for part in text.split(","):
        try:
            out.append(int(part.strip()))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part.strip()!r} is not a whole number") from None
    return out
