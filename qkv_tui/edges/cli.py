"""The command line (docs/reference.md, "The command line"): arguments -> load -> export, check or run the app."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TextIO

from qkv_tui import __version__
from qkv_tui.base.files import kind_at
from qkv_tui.base.values import escaped
from qkv_tui.core.cost_options import DEFAULT_CONTEXT, DEFAULT_DTYPE, DTYPES, MAX_CONTEXT
from qkv_tui.core.engine import combine, iter_heads
from qkv_tui.core.scenario import Scenario, ScenarioError, builtin_dir, builtin_names, load_scenario, resolve
from qkv_tui.edges import compare_args, model_args, place_args
from qkv_tui.edges.arithmetic import arithmetic_policy, computed
from qkv_tui.edges.config import THEME_NAMES, config_path, save_theme, saved_theme
from qkv_tui.teach.place import PlaceError

DEFAULT_SCENARIO = "i_love_ai"
DEFAULT_BLANKS, DEFAULT_SEED, DEFAULT_PORT = "25%", 0, 8000

Exporter = Callable[[Scenario, TextIO], None]


def _export_json(scenario: Scenario, out: TextIO) -> None:
    from qkv_tui.edges.export_json import write_json

    write_json(scenario, out)


def _export_markdown(scenario: Scenario, out: TextIO) -> None:
    from qkv_tui.edges.export_markdown import to_markdown

    out.write(to_markdown(computed(scenario)))


def _export_toml(scenario: Scenario, out: TextIO) -> None:
    from qkv_tui.edges.export_toml import to_toml

    computed(scenario)  # a scenario that cannot be computed is an error here too, before any output
    out.write(to_toml(scenario))


def _export_cost(scenario: Scenario, out: TextIO, dtype: str = DEFAULT_DTYPE, context: int = DEFAULT_CONTEXT) -> None:
    import json

    from qkv_tui.teach.cost import report

    out.write(json.dumps(report(computed(scenario), dtype, context).as_json(), indent=2) + "\n")


def _export_worksheet(scenario: Scenario, out: TextIO, blanks: str = "25%", seed: int = 0,
                      fmt: str = "markdown", separate: bool = False, output: str | None = None,
                      stages: str | None = None, heads: list[int] | None = None) -> None:
    from qkv_tui.edges.worksheet.export import write
    from qkv_tui.edges.worksheet.make import WorksheetError, build

    try:
        ws = build(computed(scenario), blanks, seed, stages=stages, heads=heads)
    except WorksheetError as exc:
        raise ScenarioError(scenario.source, str(exc)) from None
    write(ws, fmt, separate, output, out)


# ``--export FORMAT``: each writes the scenario to stdout, or raises ScenarioError before
# writing anything. Imported lazily, so ``--check`` and the app do not pay for them.
EXPORTERS: dict[str, tuple[Exporter, str]] = {
    "json": (_export_json, "every matrix as JSON (full float64 precision)"),
    "markdown": (_export_markdown, "a worked-example page, every step with its numbers"),
    "toml": (_export_toml, "a plain scenario file with every number, a model's head included"),
    "cost": (_export_cost, "each stage's FLOPs and bytes in prefill and one decode step, and the KV cache, as JSON"
                           " (--dtype, --context)"),
    "worksheet": (_export_worksheet, "a printable page with blanks to fill in and an answer key (--blanks, --seed,"
                                     " --stages, --heads, --format, --key, -o)"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {escaped(message)} (see qkv-tui --help)\n")
        raise SystemExit(2)


_PARSERS: dict[tuple[str, ...], argparse.ArgumentParser] = {}  # by the built-in names its help lists


def _parser() -> argparse.ArgumentParser:
    """Made once per process (parsing never changes it): every app --serve forks finds the app starter's."""
    names = tuple(builtin_names())
    parser = _PARSERS.get(names)
    if parser is None:
        parser = _PARSERS[names] = _new_parser(names)
    return parser


def _new_parser(names: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="qkv-tui",
        description="Step through softmax(QKᵀ/√dₖ)V one operation at a time.",
        epilog=(f"SCENARIO is a path; a bare NAME also finds NAME.toml in the current folder, then the"
                f" built-in scenario NAME ({', '.join(names)})"),
    )
    parser.add_argument("scenario", nargs="*", metavar="SCENARIO",
                        help="a scenario .toml file or a built-in name (default: i_love_ai)")
    mode = parser.add_mutually_exclusive_group()
    formats = "; ".join(f"{name}: {what}" for name, (_, what) in EXPORTERS.items())
    mode.add_argument("--export", choices=tuple(EXPORTERS), metavar="FORMAT",
                      help=f"write the scenario as FORMAT to stdout, or a worksheet to -o FILE ({formats})")
    mode.add_argument("--check", action="store_true", help="validate the scenarios; one line per file")
    mode.add_argument("--serve", action="store_true", help="serve the app to web browsers, one app per tab (a classroom)")
    parser.add_argument("--host",
                        help="--serve: the address to listen on (default 127.0.0.1: this computer only)")
    parser.add_argument("--port", type=int, help=f"--serve: the port to listen on (default {DEFAULT_PORT})")
    parser.add_argument("--public-url", metavar="URL",
                        help="--serve: the address students open, behind a reverse proxy (https://host/class/); without"
                             " it the page's addresses are relative to the page")
    parser.add_argument("--max-students", type=int, metavar="N",
                        help="--serve: at most N apps at once; the next student gets a page saying the class is full")
    parser.add_argument("--read-only", action="store_true", default=None,
                        help="the app (every student's under --serve) allows no edits: a lecture's numbers for everyone")
    parser.add_argument("--theme", choices=THEME_NAMES, help="dark (default) or light (for projectors)")
    parser.add_argument("--save-theme", action="store_true",
                        help="remember --theme for later runs (in $XDG_CONFIG_HOME/qkv-tui/config.toml)")
    parser.add_argument("--blanks", metavar="N|P%",
                        help="worksheet: how many cells to leave blank, a count (12) or a share (25%%; the default)")
    parser.add_argument("--seed", type=int, help="worksheet: which cells are blank (the same seed, the same page; default 0)")
    parser.add_argument("--format", choices=("markdown", "html", "pdf"),
                        help="worksheet: markdown (the default), html (one self-contained page) or pdf (typeset; needs"
                             " pip install 'qkv-tui[pdf]')")
    parser.add_argument("--key", choices=("separate",),
                        help="worksheet: separate writes the answer key to its own file, beside --output's (sheet-key.pdf)")
    parser.add_argument("--output", "-o", metavar="FILE", help="worksheet: write it to FILE rather than to stdout")
    parser.add_argument("--stages", metavar="NAME,NAME",
                        help="worksheet: the stages the sheet asks about, named as the stage bar names them (any case),"
                             " a range first..last, or the groups forward and backward (sgd: the SGD step that ends a"
                             " backward sheet, adamw where the file trains with AdamW); default every stage. --heads N,N:"
                             " the heads it asks about, counted from 1 as --head counts")
    parser.add_argument("--dtype", choices=tuple(DTYPES),
                        help=f"cost: the bytes of a number in the cost view and --export cost (default {DEFAULT_DTYPE})")
    parser.add_argument("--context", metavar="N", type=_context,
                        help=f"cost: the context of the decode step, in tokens (default {DEFAULT_CONTEXT})")
    parser.add_argument("--version", action="version", version=f"qkv-tui {__version__}")
    place_args.add_arguments(parser)
    model_args.add_arguments(parser)
    compare_args.add_arguments(parser)
    return parser


def _context(text: str) -> int:
    """--context N: a whole number of tokens, 1 or more (argparse turns the ValueError into its error line)."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; expected a context in tokens, such as"
                                         f" {DEFAULT_CONTEXT}") from None
    if not 1 <= value <= MAX_CONTEXT:
        raise argparse.ArgumentTypeError(f"{value} tokens; expected a whole number from 1 to {MAX_CONTEXT}")
    return value


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


def check(scenario: Scenario) -> None:
    """Compute every matrix once, a head at a time (so memory stays near one head's),
    to be sure the app and the exports can show them; raises ScenarioError.

    With [backward], the gradients at the file's own weights too, under the same arithmetic rule as the
    exports: a loss or gradient past float64 fails here with the line the JSON and Markdown would give
    (JSON has no number for ∞). Later training steps may still stop; the exports say where."""
    outputs = [head.joined for head in iter_heads(scenario)]
    combine(scenario, outputs)
    if scenario.backward is not None:
        computed(scenario)


def misplaced(args: argparse.Namespace) -> str | None:
    """Options given where they do nothing (the worksheet's outside a worksheet, the server's without
    --serve): the parser's error line, rather than being ignored without a word; None when all fit."""
    def given(*names: str) -> list[str]:
        return [f"--{name.replace('_', '-')}" for name in names if getattr(args, name) is not None]

    for flags, place, fits in ((given("blanks", "seed", "stages", "format", "key", "output"), "--export worksheet",
                                args.export == "worksheet"),
                               (given("host", "port", "public_url", "max_students"), "--serve", args.serve),
                               (given("dtype", "context"), "--export cost or the app (its cost view, c)",
                                args.export == "cost" or not (args.export or args.check or args.serve))):
        if flags and not fits:
            return f"{' and '.join(flags)} {'goes' if len(flags) == 1 else 'go'} only with {place}"
    if args.read_only and (args.export or args.check):  # no app runs there to allow edits or not
        return "--read-only goes only with the app or --serve"
    if (problem := place_args.misplaced(args)) is not None:
        return problem
    return compare_args.misplaced(args)


def worksheet_output_problem(args: argparse.Namespace) -> str | None:
    """Where a worksheet would go that cannot work: a separate key with nowhere beside it, a PDF on a terminal."""
    if args.key == "separate" and args.output is None:
        return "--key separate needs --output FILE (the key is written beside it, as FILE-key with FILE's extension)"
    if args.format == "pdf" and args.output is None and _is_terminal(sys.stdout):
        return "--format pdf writes a binary file: give --output FILE, or redirect standard output to a file"
    return None


def output_target_problem(output: str | None, separate: bool) -> str | None:
    """The error line for an --output (or the key file beside it) that exists and is not a regular file: a
    FIFO would block the write for ever, a folder or a device cannot take it. Refused before anything is
    computed, as the scenario reader refuses such a SCENARIO; None when every target is new or a regular file."""
    if output is None:
        return None
    from qkv_tui.edges.worksheet.export import key_path

    targets = [Path(output), *([key_path(Path(output))] if separate else [])]
    for target in targets:
        if (kind := kind_at(target)) is not None:
            what = "--output" if target == targets[0] else "--key separate's file"
            return (f"{escaped(str(target))}: {what} is {kind}, not a regular file; expected a new file or a regular"
                    " file to replace" + (" (leave out --output to write to standard output)" if what == "--output"
                                          else ""))
    return None


def shadow_note(spec: str) -> str | None:
    """When a bare name finds a file in the current folder that has a built-in scenario's name, the
    note that says which file is used and how to open the built-in; None otherwise."""
    if "/" in spec or "\\" in spec:
        return None  # a path is only a path
    stem = spec[:-5] if spec.endswith(".toml") else spec
    if stem not in builtin_names():
        return None
    builtin = builtin_dir() / f"{stem}.toml"
    try:
        path = resolve(spec)
        if os.path.samefile(path, builtin):  # the built-in itself (run from its own folder, say)
            return None
    except (ScenarioError, OSError):
        return None  # loading it says what is wrong
    return (f"{escaped(spec)}: using ./{escaped(str(path))} from this folder, not the built-in scenario"
            f" {stem}; for the built-in: qkv-tui {escaped(str(builtin))}")


def _note(spec: str) -> None:
    if (note := shadow_note(spec)) is not None:
        sys.stderr.write(f"note: {note}\n")


def _is_terminal(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (OSError, ValueError):  # closed
        return False


def terminal_problem() -> str | None:
    """Why the app cannot run here, or None: Textual reads keys from standard input and draws on
    standard error, and without a terminal there it would run unseen, using CPU, until killed.
    Under textual-serve (which names its own driver in TEXTUAL_DRIVER) the browser is the terminal."""
    if os.environ.get("TEXTUAL_DRIVER"):
        return None
    missing = [name for name, stream in (("standard input", sys.__stdin__), ("standard error", sys.__stderr__))
               if not _is_terminal(stream)]
    if not missing:
        return None
    return (f"the app needs a terminal, and {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not one;"
            " without a terminal, use --export FORMAT (to a file) or --serve (in web browsers)")


def _warn(line: str) -> None:
    sys.stderr.write(f"warning: {escaped(line)}\n")


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    load: Callable[[str], Scenario] = load_scenario
    if (problem := misplaced(args)) is not None:
        _parser().error(problem)
    if model_args.wants_model(args):  # --model SOURCE --text TEXT: a [model] table built from the options
        if (problem := model_args.problem(args)) is not None:
            _parser().error(problem)
        args.scenario, load = [args.model], lambda _spec: model_args.model_scenario(args)
        note: Callable[[str], None] = lambda _spec: None
    elif args.tensors is not None:  # --tensors FILE: a learner's arrays made a scenario (edges/compare.py)
        from qkv_tui.edges import compare as learner

        args.scenario, load = [args.tensors], learner.tensors_loader(args)
        note = lambda _spec: None
    else:
        note = _note
    if args.check:
        if not args.scenario:
            _parser().error("--check needs at least one SCENARIO")
        status = 0
        for spec in args.scenario:
            note(spec)
            try:
                with arithmetic_policy(spec):
                    scenario = load(spec)
                    check(scenario)
            except ScenarioError as exc:
                status = _fail(exc)
                continue
            sys.stdout.write(f"ok: {escaped(spec)}: {scenario.summary()}\n")
            for warning in scenario.warnings():
                sys.stderr.write(f"warning: {escaped(spec)}: {warning}\n")
        return status
    blanks = DEFAULT_BLANKS if args.blanks is None else args.blanks
    if args.export == "worksheet":
        from qkv_tui.edges.worksheet.make import WorksheetError, parse_blanks

        try:
            parse_blanks(blanks)
        except WorksheetError as exc:
            _parser().error(str(exc))
        if (problem := worksheet_output_problem(args)) is not None:
            _parser().error(problem)
        if (problem := output_target_problem(args.output, args.key == "separate")) is not None:
            sys.stderr.write(f"error: {problem}\n")
            return 2
    if len(args.scenario) > 1:
        _parser().error("give one SCENARIO (several are allowed only with --check)")
    spec = args.scenario[0] if args.scenario else DEFAULT_SCENARIO
    port = DEFAULT_PORT if args.port is None else args.port
    if args.serve and not 1 <= port <= 65535:
        _parser().error(f"--port {port}: expected a port number from 1 to 65535")
    if args.max_students is not None and args.max_students < 1:
        _parser().error(f"--max-students {args.max_students}: expected a number of students, 1 or more")
    if args.public_url is not None:
        from qkv_tui.edges.serve.server import public_url_problem

        if (problem := public_url_problem(args.public_url)) is not None:
            _parser().error(f"--public-url {args.public_url}: {problem}")
    note(spec)
    if args.export:
        exporter = EXPORTERS[args.export][0]
        if args.export == "worksheet":
            exporter = functools.partial(_export_worksheet, blanks=blanks,
                                         seed=DEFAULT_SEED if args.seed is None else args.seed,
                                         fmt=args.format or "markdown", separate=args.key == "separate",
                                         output=args.output, stages=args.stages,
                                         heads=args.heads if model_args.sheet_heads(args) else None)
        if args.export == "cost":
            exporter = functools.partial(_export_cost, dtype=args.dtype or DEFAULT_DTYPE,
                                         context=args.context or DEFAULT_CONTEXT)
        try:
            with arithmetic_policy(spec):
                if args.compare is not None:
                    from qkv_tui.edges import compare as learner

                    return learner.export_compare(args, load(spec), exporter, sys.stdout)
                exporter(load(spec), sys.stdout)
        except ScenarioError as exc:
            return _fail(exc)
        except RuntimeError as exc:  # the worksheet's own: typst not installed, a file that cannot be written
            from qkv_tui.edges.worksheet.export import OutputError
            from qkv_tui.edges.worksheet.render.typst import MissingExtraError, TypesetError

            if not isinstance(exc, OutputError | MissingExtraError | TypesetError):
                raise
            sys.stderr.write(f"error: {exc}\n")
            return 2
        return 0
    # --serve's app starter may have loaded and computed it already, and drawn its first frame (serve/prepared.py);
    # only the starter loads that module, so a command typed at a terminal does not
    starter = sys.modules.get("qkv_tui.edges.serve.prepared")
    ready = starter.take(spec) if starter is not None and load is load_scenario else None
    try:
        with arithmetic_policy(spec):
            scenario = load(spec) if ready is None else ready.scenario
            comp = computed(scenario) if ready is None else ready.comp  # [backward]'s gradients as --check
    except ScenarioError as exc:
        return _fail(exc)
    notice: str | None = None
    try:
        place = place_args.place(args, comp)
        if args.compare is not None:  # the app opens at the first cell that differs, unless --stage says where
            from qkv_tui.edges import compare as learner

            with arithmetic_policy(spec):
                first, notice = learner.app_place(args, comp)
            place = first if place is None else place
    except PlaceError as exc:
        _parser().error(str(exc))
    except ScenarioError as exc:
        return _fail(exc)
    if args.save_theme and args.theme is None:
        _parser().error("--save-theme needs --theme dark or --theme light")
    if not args.serve and (problem := terminal_problem()) is not None:
        sys.stderr.write(f"error: {problem}\n")
        return 2  # before the theme is saved: a command refused does nothing
    if args.save_theme:
        try:
            save_theme(args.theme)
        except OSError as exc:
            sys.stderr.write(f"error: {escaped(str(config_path()))}: cannot save the theme: {exc.strerror or exc}\n")
            return 2
    theme = args.theme or saved_theme(warn=_warn)
    if args.serve:
        from qkv_tui.edges.serve.server import DEFAULT_HOST, serve

        # every tab's app is told the theme, so the config file is read once, here, not once per tab
        return serve(spec, scenario.title, args.host or DEFAULT_HOST, port,
                     ["--theme", theme or "dark", *(["--read-only"] if args.read_only else []),
                      *place_args.passed_on(args)], public_url=args.public_url, max_students=args.max_students)
    if args.dtype is not None or args.context is not None:  # the cost view's (c) dtype and decode context
        from qkv_tui.teach.cost import choose

        choose(args.dtype or DEFAULT_DTYPE, args.context or DEFAULT_CONTEXT)
    from qkv_tui.ui.app import QKVApp  # Textual loads only when the app is really run

    app_class = QKVApp
    if notice is not None:  # --compare: a notice of what agreed and what differs, over the first difference
        from qkv_tui.ui.compare_notice import noticed

        app_class = noticed(notice)
    app = app_class(scenario, computation=comp, theme=theme, read_only=bool(args.read_only), place=place,
                 decimals=args.decimals, presenter=None if ready is None else ready.presenter)
    app.run()
    return app.return_code or 0  # Textual sets 1 when the app died of an unhandled exception
