"""No module of the package imports itself round a circle, however indirectly.

A circle works only while every module in it happens to be imported in the right order and
each uses the others' names late enough; one moved import then breaks it at start-up. So every
import counts, read from the source with ast: at the top, inside functions, and under
``if TYPE_CHECKING:`` (mypy and a reader follow those too). ``from qkv_tui.x import y`` imports
the module ``qkv_tui.x.y`` when there is one, else the module ``qkv_tui.x`` that holds ``y``.
Only imports written in the source count: the parent packages Python runs first do not (the
package root imports the core, and every module sits under the root).
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "qkv_tui"

ALLOWED: list[frozenset[str]] = []  # no circle is allowed; the cycle finder takes allowances for its own tests

Graph = dict[str, set[str]]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_by(tree: ast.AST, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The package's modules that ``name``'s source imports (any other import is left out)."""
    found: set[str] = set()
    top = name.split(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                # relative: count from the module's own package
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, source] if source else base)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.add(sub if sub in known else source)
    return {m for m in found if m in known and m.split(".")[0] == top}


def import_graph(root: Path) -> Graph:
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    known = set(files)
    return {
        name: imported_by(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py", known)
        for name, path in files.items()
    }


def components(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iterative so a deep chain cannot hit the recursion limit."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    members: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    found.append(sorted(members))
    return found


def shortest_path(graph: Mapping[str, Iterable[str]], start: str, goal: str, within: set[str]) -> list[str]:
    """start → … → goal by the fewest imports, staying inside one component."""
    came_from = {start: start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [goal]
            while path[-1] != start:
                path.append(came_from[path[-1]])
            return path[::-1]
        for nxt in sorted(graph.get(node, ())):
            if nxt in within and nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"no path {start} → {goal} within {sorted(within)}")


def cycles(graph: Mapping[str, Iterable[str]], allowed: Iterable[frozenset[str]] = ()) -> list[str]:
    """Each circle as 'a → b → a': for every import inside a component, the shortest way back round.

    Naming one per import, not one per component, shows each pair that must be untied. Each
    circle starts at its first module by name, so one found from two of its imports is named once.
    A component that is exactly an allowed group is passed over; one grown beyond it is not.
    """
    named: list[str] = []
    excused = set(allowed)
    for members in components(graph):
        inside = set(members)
        if inside in excused or (len(members) == 1 and members[0] not in graph.get(members[0], ())):
            continue
        for node in members:
            for nxt in sorted(set(graph.get(node, ())) & inside):
                loop = [node, *shortest_path(graph, nxt, node, inside)][:-1]
                first = loop.index(min(loop))
                loop = loop[first:] + loop[:first]
                text = " → ".join([*loop, loop[0]])
                if text not in named:
                    named.append(text)
    return named


def test_the_package_has_no_import_cycles() -> None:
    graph = import_graph(PACKAGE)
    assert len(graph) > 50 and graph["qkv_tui.core.scenario"], "the graph was not read"
    found = cycles(graph, ALLOWED)
    assert not found, "import cycles:\n" + "\n".join(found)


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_the_check_finds_a_two_module_cycle(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import thing\n",
            "pkg/b.py": "def f():\n    from pkg import a  # a lazy import closes the circle too\n",
            "pkg/c.py": "import pkg.a\n",
        },
    )
    assert cycles(import_graph(root)) == ["pkg.a → pkg.b → pkg.a"]


def test_the_check_sees_type_checking_relative_and_self_imports(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "",
            "pkg/sub/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .y import Y\n",
            "pkg/sub/y.py": "from pkg.sub import z\n",
            "pkg/sub/z.py": "from ..sub.x import X\n",
            "pkg/me.py": "import pkg.me\n",
        },
    )
    assert cycles(import_graph(root)) == ["pkg.me → pkg.me", "pkg.sub.x → pkg.sub.y → pkg.sub.z → pkg.sub.x"]


def test_an_allowance_excuses_exactly_its_group(tmp_path: Path) -> None:
    two = {"pkg/__init__.py": "", "pkg/a.py": "import pkg.b\n", "pkg/b.py": "import pkg.a\n"}
    group = frozenset({"pkg.a", "pkg.b"})
    assert cycles(import_graph(write(tmp_path / "two", two)), [group]) == []
    grown = {**two, "pkg/b.py": "import pkg.c\n", "pkg/c.py": "import pkg.a\n"}
    assert cycles(import_graph(write(tmp_path / "grown", grown)), [group]) == ["pkg.a → pkg.b → pkg.c → pkg.a"]


def test_a_clean_package_has_none(tmp_path: Path) -> None:
    root = write(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "import pkg.b\n", "pkg/b.py": "import os\n"})
    assert cycles(import_graph(root)) == []
