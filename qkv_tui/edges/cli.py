"""The command line (contracts §2): arguments -> load -> export, check or run the app."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from qkv_tui import __version__
from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import ScenarioError, builtin_names, load_scenario

DEFAULT_SCENARIO = "i_love_ai"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} (see qkv-tui --help)\n")
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="qkv-tui",
        description="Step through softmax(QKᵀ/√dₖ)V one operation at a time.",
        epilog=f"built-in scenarios (by bare name): {', '.join(builtin_names())}",
    )
    parser.add_argument("scenario", nargs="*", metavar="SCENARIO",
                        help="a scenario .toml file or a built-in name (default: i_love_ai)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--export", choices=("json", "markdown"), help="print every matrix as JSON, or a worked-example page")
    mode.add_argument("--check", action="store_true", help="validate the scenarios; one line per file")
    parser.add_argument("--version", action="version", version=f"qkv-tui {__version__}")
    return parser


def _fail(error: ScenarioError) -> int:
    sys.stderr.write(f"error: {error}\n")
    return 2


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `qkv-tui --export json x | head` is fine
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.check:
        if not args.scenario:
            _parser().error("--check needs at least one SCENARIO")
        status = 0
        for spec in args.scenario:
            try:
                scenario = load_scenario(spec)
                compute(scenario)
            except ScenarioError as exc:
                status = _fail(exc)
                continue
            sys.stdout.write(f"ok: {spec}: {scenario.summary()}\n")
        return status
    if len(args.scenario) > 1:
        _parser().error("give one SCENARIO (several are allowed only with --check)")
    spec = args.scenario[0] if args.scenario else DEFAULT_SCENARIO
    try:
        scenario = load_scenario(spec)
        comp = compute(scenario)
    except ScenarioError as exc:
        return _fail(exc)
    if args.export == "json":
        from qkv_tui.edges.export_json import to_json

        sys.stdout.write(to_json(comp))
        return 0
    if args.export == "markdown":
        from qkv_tui.edges.export_markdown import to_markdown

        sys.stdout.write(to_markdown(comp))
        return 0
    from qkv_tui.ui.app import QKVApp  # Textual loads only when the app is really run

    QKVApp(scenario, computation=comp).run()
    return 0
