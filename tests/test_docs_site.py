"""The documentation a person follows (contracts §18): README.md and the docs/ pages, built as a site.

Every link between the pages lands on a file, and on a heading where it names one (the ids MkDocs gives
headings: Python-Markdown's toc slugs); every `qkv-tui` command in a shell block is one the real argument
parser accepts, with the options that fit together and a scenario that exists (the quick `--check` ones
run, and a `--stage` opens on its built-in); `mkdocs build --strict` passes where MkDocs is installed.
Nothing here needs the network.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import builtin_names
from qkv_tui.edges import cli, model_args, place_args

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md")), ROOT / "benchmarks" / "README.md"]
SHELL = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")


def name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def blocks(text: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The page's lines outside fenced blocks (a fenced line is blanked, so line numbers hold), and its fenced
    blocks as (language, lines)."""
    prose: list[str] = []
    fenced: list[tuple[str, list[str]]] = []
    fence: str | None = None
    for line in text.splitlines():
        opened = FENCE.match(line.lstrip())
        if fence is None and opened:
            fence = opened.group(1)
            fenced.append((opened.group(2).lower(), []))
            prose.append("")
        elif fence is not None:
            if line.lstrip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            else:
                fenced[-1][1].append(line)
            prose.append("")
        else:
            prose.append(line)
    return prose, fenced


# --- anchors: the ids MkDocs gives headings ------------------------------------------------------------------


def slug(heading: str) -> str:
    """Python-Markdown's toc slugify (MkDocs' and Material's default) of a heading's text as rendered: inline
    code keeps its text, links their words, emphasis goes; accents fold to ASCII and the rest is dropped."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text).replace("**", "").replace("__", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def headings(page: Path) -> list[str]:
    prose, _ = blocks(page.read_text(encoding="utf-8"))
    return [m.group(1).strip().rstrip("#").strip() for line in prose if (m := re.match(r"#{1,6}\s+(.*)", line))]


def anchors(page: Path) -> set[str]:
    """Every heading's id, a repeated one numbered as toc numbers it (_1, _2 …)."""
    ids: set[str] = set()
    for heading in headings(page):
        base = anchor = slug(heading)
        count = 0
        while anchor in ids or not anchor:
            count += 1
            anchor = f"{base}_{count}"
        ids.add(anchor)
    return ids


def test_the_slug_rule_is_python_markdowns() -> None:
    assert slug("What you see") == "what-you-see"
    assert slug("Every head at once (`v`)") == "every-head-at-once-v"
    assert slug("`[mla]`: multi-head latent attention (DeepSeek-V2/V3)") == "mla-multi-head-latent-attention-deepseek-v2v3"
    assert slug("Predict-then-reveal (`p`)") == "predict-then-reveal-p"
    if importlib.util.find_spec("markdown") is None:
        return
    from markdown.extensions.toc import slugify  # MkDocs' own dependency: the rule itself, where it is installed

    for page in PAGES:
        for heading in headings(page):
            plain = re.sub(r"`([^`]*)`", r"\1", heading).replace("**", "")
            assert slug(heading) == slugify(plain, "-"), (name(page), heading)


# --- links -----------------------------------------------------------------------------------------------------


LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def links(page: Path) -> list[tuple[int, str]]:
    prose, _ = blocks(page.read_text(encoding="utf-8"))
    found = []
    for number, line in enumerate(prose, 1):
        line = re.sub(r"`[^`]*`", "", line)  # a link written inside code is text, not a link
        found += [(number, m.group(1)) for m in LINK.finditer(line)]
    return found


def internal(target: str) -> bool:
    return not re.match(r"[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto: … are not ours to check


def broken_links(page: Path) -> list[str]:
    broken = []
    for number, target in links(page):
        if not internal(target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.name}:{number}: {target}"
        if not dest.exists():
            broken.append(f"{where}: no file {path}")
            continue
        if page.parent == DOCS and DOCS not in dest.parents:
            broken.append(f"{where}: leaves docs/, so the site cannot follow it")
        if anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{where}: {dest.name} has no heading #{anchor}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_internal_link_resolves(page: Path) -> None:
    broken = broken_links(page)
    assert not broken, "\n".join(broken)


def test_the_link_check_catches_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A page\n\n## Its part\n\n## Its part\n\n```sh\n# not a heading\n```\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#its-part_1) [no](a.md#not-a-heading) [gone](c.md) `[code](x.md)` [web](https://x.org/y)\n",
                    encoding="utf-8")
    assert anchors(tmp_path / "a.md") == {"a-page", "its-part", "its-part_1"}
    assert broken_links(page) == ["b.md:1: a.md#not-a-heading: a.md has no heading #not-a-heading", "b.md:1: c.md: no file c.md"]


def test_the_site_home_is_the_readme() -> None:
    """docs/index.md is the README with its links made relative to docs/, so the two never tell different things."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert (DOCS / "index.md").read_text(encoding="utf-8") == readme.replace("](docs/", "]("), (
        "docs/index.md differs from README.md: write README.md over it with '](docs/' made ']('")


def test_the_readme_is_a_door_to_the_docs() -> None:
    """§18: at most 200 lines, one picture, the paths of each reader into at least four pages of docs/."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    assert len(pictures) == 1 and (ROOT / pictures[0]).is_file()
    pages = {t.partition("#")[0] for _, t in links(ROOT / "README.md") if t.startswith("docs/") and ".md" in t}
    assert len(pages) >= 4, pages
    for reader in ("**Teachers.**", "**Students.**", "**Researchers", "**Contributors.**", "**Classroom hosts.**",
                   "**Scenario authors.**"):
        assert reader in readme, reader
    mkdocs = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert all(page.removeprefix("docs/") in mkdocs for page in pages), "a page the README links is missing from the site's nav"


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = readme[readme.index("## Test it"):].split("```sh\n")[1].split("\n")[0]
    ci = next(line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if " -m pytest " in line)
    assert shown.split(" && ")[-1] == ci.split("#")[0].strip()


def test_every_builtin_has_a_lecture() -> None:
    """The lecturer finds their built-in on the teachers' page: every built-in is in its table."""
    page = (DOCS / "teachers.md").read_text(encoding="utf-8")
    table = page[page.index("## Which built-in for which lecture"):]
    table = table[:table.index("\n\n", table.index("| ---"))]
    missing = [n for n in builtin_names() if f"`{n}`" not in table]
    assert not missing, f"add {missing} to the table 'Which built-in for which lecture' in docs/teachers.md"


# --- commands -------------------------------------------------------------------------------------------------


def shell_commands(text: str) -> list[list[str]]:
    """Each `qkv-tui …` command of a page's shell blocks, as its argument list (the program's name dropped);
    pipes, `&&`, `;`, redirections and comments end a command, as the shell reads them."""
    _, fenced = blocks(text)
    found = []
    for language, lines in fenced:
        if language not in SHELL:
            continue
        text = "\n".join(line.removeprefix("$ ") for line in lines).replace("\\\n", " ")
        for line in text.splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            words, command, skip = list(lexer), [], False
            for word in [*words, ";"]:
                if skip:
                    skip = False
                elif word in {">", ">>", "<", "2>"}:
                    skip = True
                elif set(word) <= set("();|&"):
                    if command and Path(command[0]).name == "qkv-tui":
                        found.append(command[1:])
                    command = []
                else:
                    command.append(word)
    return found


COMMANDS = [(page, argv) for page in PAGES for argv in shell_commands(page.read_text(encoding="utf-8"))]


def test_the_docs_show_commands_to_check() -> None:
    pages = {name(page) for page, _ in COMMANDS}
    assert {"README.md", "docs/teachers.md", "docs/classroom.md", "docs/real-models.md"} <= pages, pages
    shell = "```sh\necho x && qkv-tui --check rope | head  # a comment\n.venv/bin/qkv-tui --theme \\\n  light > log\n```\n"
    assert shell_commands(shell) == [["--check", "rope"], ["--theme", "light"]]


def parsed(argv: list[str], capsys: pytest.CaptureFixture[str]) -> argparse.Namespace | None:
    """The command line as qkv-tui's own parser reads it, and the checks it makes before doing anything; None
    for --help and --version, which print and leave."""
    try:
        args = cli._parser().parse_args(argv)
    except SystemExit as leave:
        assert leave.code == 0, capsys.readouterr().err
        return None
    assert cli.misplaced(args) is None, cli.misplaced(args)
    if model_args.wants_model(args):
        assert model_args.problem(args) is None, model_args.problem(args)
    return args


@pytest.mark.parametrize(("page", "argv"), COMMANDS, ids=[f"{name(p)}: qkv-tui {' '.join(a)}" for p, a in COMMANDS])
def test_every_command_in_the_docs_parses(page: Path, argv: list[str], capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = parsed(argv, capsys)
    if args is None:
        return
    builtins = set(builtin_names())
    for spec in args.scenario:  # a bare name is a built-in; a .toml file is the reader's, but the shipped ones exist
        if "/" not in spec and not spec.endswith(".toml"):
            assert spec in builtins, f"{spec} is not a built-in scenario"
        elif spec.startswith("scenarios/"):
            assert (ROOT / spec).is_file(), spec
    quick = [spec for spec in args.scenario if spec in builtins]
    if args.check and quick == args.scenario:
        monkeypatch.chdir(tmp_path)
        assert cli.main(argv) == 0, capsys.readouterr().err
        assert capsys.readouterr().out.count("ok: ") == len(quick)
    if args.stage is not None and quick:
        place_args.place(args, compute(load_scenario(quick[0])))  # the stage and operation exist there


def test_a_command_the_parser_refuses_fails_here(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--export", "svg", "i_love_ai"], ["--blanks", "3", "i_love_ai"], ["--port", "8001", "i_love_ai"]):
        with pytest.raises(AssertionError):
            parsed(argv, capsys)


# --- the site ---------------------------------------------------------------------------------------------------


def test_the_site_builds_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed (pip install -e '.[docs]'); .ci/run installs them")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, check=False)
    assert done.returncode == 0, done.stderr
    built = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    for page in DOCS.glob("*.md"):
        assert ("index.html" if page.stem == "index" else f"{page.stem}/index.html") in built, page.name
