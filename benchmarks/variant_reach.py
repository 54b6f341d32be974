"""How far each variant reaches into the package: the modules outside it that name it in code.

    python benchmarks/variant_reach.py [--list] [PACKAGE_DIR]     (default: the qkv_tui next to this file)

With ``--list``, under each variant's count, every module counted and the names in it that matched.

For each variant, the count is of modules of the package, outside ``importers/`` and outside the variant's
own modules, whose code names the variant. Read with ``ast``, so comments and docstrings never count. A
module names a variant where one of these matches the variant's pattern (VARIANTS below, a regular
expression over the whole name; a variant's word counts only as a word part, between ``_``, a capital or an
end, so ``property`` and ``DropEditsScreen`` do not name RoPE):

- a name or an attribute (``sc.rope``, ``hr.Q_rot``, ``Rotated``), a keyword argument (``softcap=``),
  a function's parameter;
- an import: a module path's last part or an imported name (``from qkv_tui.kernels.mla import mla_head``);
- a string constant that reads as a key (letters, digits and ``_`` only: ``"Q_rot"``, ``"sink"``).

A variant's own modules are those whose file name holds one of its OWN words (``kernels/rope.py``,
``teach/stages/rotate.py``, ``core/variants/sinks.py``).

Beside the count, two readings of it, so that a reader can tell a consumer that asks for the variant by name
from a module that merely shares a word with it or builds on it:

- ``homonyms``: the same count with the names of HOMONYMS left out. Each is a name another part uses for a
  thing of its own that has nothing to do with the variant (Mamba-2's ``gate`` z, MLA's latent ``q_norm``,
  RoPE scaling's ``"linear"`` type); each is listed with why, and ``--list`` marks every one it left out.
- ``consumers``: of those, the modules that are no part's own (COMPOSERS names the own words of the parts
  outside VARIANTS, and the words of VARIANTS count for each other): the engine, the trace, the exports, the
  views. A part that is built on another (MLA's decoupled RoPE, the indexer's rotated keys) stays counted in
  the first two columns; this column is the question "does a consumer test for the variant by name".

Beside it, the tests for presence on a head's result: ``X is None`` / ``X is not None`` where X is one of
HeadResult's per-variant fields as they were before the parts (FIELDS, on any receiver but the scenario's),
or a part lookup (``hr.part(Rotated)``); counted over the whole package, importers included.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

VARIANTS: dict[str, str] = {
    "rope": r"(^|_)(rope|Rope|ROPE)($|_|[A-Z])|^[QqKk]_rot$|^[Rr]otated$|^turn_of$",
    "alibi": r"(?i)alibi|^slopes?$|^biased$",
    "sinks": r"(?i)^sinks?$|^sink_|_sinks?$|^sunk$|^sinkspec$",
    "softcap": r"(?i)soft_?cap|^capped$|^capspec$",
    "qk_norm": r"(?i)qk_?norm|^[qk]_norm(ed)?$",
    "gate": r"^(W_G|gate|gated|gate_logit|gated_output|Gated|GateSpec|gate_of|gate_backward)$",
    "linear": r"(?i)^linear($|_)|_linear$|^linearforward$|^linearspec$",
    "deltanet": r"(?i)deltanet|^delta$|^around$|^deltaspec$|^deltaforward$",
    "mla": r"(?i)(^|_)mla($|_)",
}
OWN: dict[str, tuple[str, ...]] = {
    "rope": ("rope", "rotate"), "alibi": ("alibi",), "sinks": ("sink",), "softcap": ("softcap", "soft_cap"),
    "qk_norm": ("qk_norm", "qk_all"), "gate": ("gate",), "linear": ("linear", "linback"),
    "deltanet": ("deltanet",), "mla": ("mla",),
}
# the parts outside VARIANTS, by the words of their own modules' file names
COMPOSERS: tuple[str, ...] = ("differential", "indexer", "dsa", "ssd", "shared_kv", "kda", "value_scale", "v_norm")
# (variant, a word of the module's path, names): where that module's names are another thing that shares the word
HOMONYMS: tuple[tuple[str, str, frozenset[str], str], ...] = (
    ("qk_norm", "mla", frozenset({"q_norm"}), "MLA's RMSNorm of the query latent c_Q (DeepSeek's q_a_layernorm)"),
    ("qk_norm", "indexer", frozenset({"k_norm", "k_normed"}), "the DSA indexer's LayerNorm of its keys (k_norm)"),
    ("gate", "ssd", frozenset({"gate", "gated"}), "Mamba-2's output gate silu(z), not [gate]'s W_G"),
    ("gate", "deltanet", frozenset({"gate"}), "Gated DeltaNet's gated output norm (silu or σ of z), not [gate]"),
    ("gate", "serve/zygote", frozenset({"gate"}), "the pipe that starts the apps forked together"),
    ("linear", "rope_scaling", frozenset({"linear"}), "RoPE scaling's type \"linear\" (Position Interpolation)"),
    ("linear", "rotate", frozenset({"linear"}), "RoPE scaling's type \"linear\" (Position Interpolation)"),
    ("deltanet", "display/train_view", frozenset({"delta"}), "the Train view's change of a weight since step 0"),
    ("alibi", "kernels/deltanet_backward", frozenset({"slope"}), "softplus' slope σ(a) in g read backwards"),
)
FIELDS = {"Q_rot", "K_rot", "bias", "slope", "sink", "sink_exp", "capped", "softcap", "Q_normed", "K_normed",
          "W_G", "gate_logit", "gate", "gated_output", "linear", "deltanet", "around", "mla"}
SCENARIO = re.compile(r"(^|\.)(sc|scenario|spec|layer|att|args)(\.|$)|sc\.heads|scenario\.heads")
KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def names_in(tree: ast.AST) -> set[str]:
    """Every name the module's code uses, as the docstring above lists them."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, (ast.keyword, ast.arg)) and node.arg is not None:
            found.add(node.arg)
        elif isinstance(node, ast.ImportFrom):
            found.add((node.module or "").rsplit(".", 1)[-1])
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name.rsplit(".", 1)[-1] for alias in node.names)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
              and KEY.match(node.value)):
            found.add(node.value)
    return found


def presence_tests(tree: ast.AST) -> int:
    count = 0
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot))
                and isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value is None):
            continue
        left = node.left
        field = isinstance(left, ast.Attribute) and left.attr in FIELDS and not SCENARIO.search(ast.unparse(left.value))
        lookup = isinstance(left, ast.Call) and isinstance(left.func, ast.Attribute) and left.func.attr == "part"
        count += field or lookup
    return count


def main(package: Path, listing: bool = False) -> None:
    modules = sorted(p for p in package.rglob("*.py"))
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in modules}
    used = {p: names_in(t) for p, t in trees.items()}
    counted = [p for p in modules if p.relative_to(package).parts[0] != "importers"]
    print(f"{len(modules)} modules in {package} ({len(counted)} outside importers/)")
    print(f"{'variant':<10} {'modules':>7} {'homonyms':>9} {'consumers':>9}")
    owners = (*COMPOSERS, *(w for words in OWN.values() for w in words))
    for variant, pattern in VARIANTS.items():
        rx = re.compile(pattern)
        hits = {p: sorted(n for n in used[p] if rx.search(n)) for p in counted if not any(w in p.stem for w in OWN[variant])}
        reach = {p: names for p, names in hits.items() if names}
        left_out = {p: {n for n in names for v, where, homonyms, _ in HOMONYMS
                        if v == variant and where in p.relative_to(package).as_posix() and n in homonyms}
                    for p, names in reach.items()}
        meant = [p for p, names in reach.items() if set(names) - left_out[p]]
        consumers = [p for p in meant if not any(w in p.stem for w in owners if w not in OWN[variant])]
        print(f"{variant:<10} {len(reach):>7} {len(meant):>9} {len(consumers):>9}")
        if listing:
            for p, names in reach.items():
                mark = "" if p in consumers else "  [homonym]" if p not in meant else "  [another part's]"
                shown = ", ".join(f"{n}*" if n in left_out[p] else n for n in names)
                print(f"    {p.relative_to(package)}: {shown}{mark}")
    if listing:
        print("homonyms (* above):")
        for variant, where, names, why in HOMONYMS:
            print(f"    {variant}: {', '.join(sorted(names))} in {where}: {why}")
    print(f"presence tests on a head's variant fields or parts: {sum(presence_tests(t) for t in trees.values())}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--list"]
    main(Path(args[0]) if args else Path(__file__).resolve().parent.parent / "qkv_tui", "--list" in sys.argv[1:])
