"""The worksheet's formulas set as math: the app's plain-text notation (``X̂ = x / √(ms + eps)·γ``,
``Q[I,0] = X[I]·W_Q[:,0] = 1·1 + 0·0 = 2``) parsed once into a small tree, written as Typst math or MathML.

Safe by construction: every name and every label (a token from the scenario file, anything not
recognised) is written as a quoted string (Typst) or escaped text (MathML), never as markup, so no
title, token or head name can inject markup or break a compile. A formula whose brackets do not
balance is not parsed at all and prints as plain text.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

# --- the tree ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Var:  # a one-letter variable, set in italics: Q, x, θ
    name: str


@dataclass(frozen=True)
class Word:  # a name of several letters or a label, set upright: scores, softmax, "love"
    text: str


@dataclass(frozen=True)
class Num:
    text: str


@dataclass(frozen=True)
class Op:
    sym: str  # "=", "+", "−", "·", "⊙", "|", "/", ",", ":", "∞", "(", ")", "[", "]"; " " a word's space kept


@dataclass(frozen=True)
class Sqrt:
    body: tuple[Node, ...]


@dataclass(frozen=True)
class Script:  # base with a sub- and/or superscript: W_Q, dₖ, e^(x − m), Kᵀ
    base: Node
    sub: tuple[Node, ...] = ()
    sup: tuple[Node, ...] = ()


@dataclass(frozen=True)
class Accent:  # X̂, Q', θ'
    base: Node
    mark: str  # "hat" or "prime"


Node = Var | Word | Num | Op | Sqrt | Script | Accent

_SUBS = {"ₖ": "k", "ᵢ": "i", "ⱼ": "j", "₀": "0", "₁": "1", "₂": "2", "₃": "3", "₄": "4", "₅": "5", "₆": "6",
         "₇": "7", "₈": "8", "₉": "9", "ₙ": "n", "ₘ": "m", "ₒ": "o"}
_SUPS = {"ᵀ": "T", "²": "2", "³": "3"}
_OPS = "=+−-·⊙|/,:∞×≈"
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_HAT = "\u0302"


def balanced(text: str) -> bool:
    depth: list[str] = []
    for ch in text:
        if ch in "([":
            depth.append(ch)
        elif ch in ")]" and (not depth or depth.pop() != {")": "(", "]": "["}[ch]):
            return False
    return not depth


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def seq(self, stop: str = "") -> tuple[Node, ...]:
        out: list[Node] = []
        while self.i < len(self.s) and self.s[self.i] not in stop:
            node = self.atom(out)
            if node is not None:
                out.append(node)
        return tuple(out)

    def atom(self, before: list[Node]) -> Node | None:
        s, ch = self.s, self.s[self.i]
        if ch.isspace():
            while self.i < len(s) and s[self.i].isspace():
                self.i += 1
            # math drops the source's spaces, so "dk_C[·,1] (head 1)", "W_Vᵀ at [I,1]" and "Σ over the heads"
            # would be set glued: a bracket, a word or a number after a space is kept apart from the atom before it
            if (self.i < len(s) and (s[self.i] in "([√" or s[self.i].isalnum()) and before
                    and not _open(before[-1])):
                return Op(" ")
            return None
        if ch == "√":
            self.i += 1
            if self.i < len(s) and s[self.i] == "(":
                self.i += 1
                inner = self.seq(")")
                self.i += 1
                return Sqrt(inner)
            root: list[Node] = []
            while (self.i < len(s) and not s[self.i].isspace() and s[self.i] not in ")]"
                   and (not root or s[self.i] in _SUBS or s[self.i] in _SUPS)):
                got = self.atom(root)  # √dₖ: the root holds d and its subscript
                if got is not None:
                    root.append(got)
            return Sqrt(tuple(root))
        if ch == "^" and before:
            self.i += 1
            if self.i < len(s) and s[self.i] == "(":
                self.i += 1
                sup = self.seq(")")
                self.i += 1
            elif self.i < len(s) and s[self.i] == "{" and (end := _brace(s, self.i)) > 0:  # e^{g_t}
                sup = _Parser(s[self.i + 1:end]).seq()
                self.i = end + 1
            elif m := re.compile(r"[−-]?" + _NUMBER.pattern).match(s, self.i):  # e^-2.310
                self.i = m.end()
                sup = (Op("−"), Num(m.group()[1:])) if m.group()[0] in "−-" else (Num(m.group()),)
            else:
                nxt = self.atom([]) if self.i < len(s) else None  # a ^ that ends the text raises nothing
                sup = () if nxt is None else (nxt,)
            before.append(_attach(before.pop(), sup=sup))
            return None
        if ch in _SUBS or ch in _SUPS:
            if not before or _open(before[-1]):  # nothing to hang it on: (ₖ
                self.i += 1
                return Word(ch)
            run = ""
            kind = _SUBS if ch in _SUBS else _SUPS
            while self.i < len(s) and s[self.i] in kind:
                run += kind[s[self.i]]
                self.i += 1
            base = before.pop()
            before.append(_attach(base, sub=(_plain(run),)) if kind is _SUBS else _attach(base, sup=(_plain(run),)))
            return None
        if ch == "[":
            end = _closing(s, self.i)
            if "|" in s[self.i:end] and (not before or _open(before[-1])):
                return self.group(before, end)  # [q_C | q_R']: columns side by side, not an index
            return self.labels(before)
        if m := _NUMBER.match(s, self.i):
            self.i = m.end()
            return Num(m.group())
        if ch.isalpha():
            j = self.i
            while j < len(s) and s[j].isalpha() and s[j] not in _SUBS and s[j] not in _SUPS:
                j += 1
            word = s[self.i:j]
            self.i = j
            if len(word) > 1 and word.isupper() and len(word) <= 3:  # QK: a product of two variables
                before.extend(Var(c) for c in word[:-1])
                word = word[-1]
            sym: Node = Var(word) if len(word) == 1 else Word(word)
            if self.i < len(s) and s[self.i] == _HAT:
                self.i += 1
                sym = Accent(sym, "hat")
            primes = self.primes()
            sub: tuple[Node, ...] = ()
            if self.i + 1 < len(s) and s[self.i] == "_" and (end := _brace(s, self.i + 1)) > 0:  # S_{t−1}
                sub = _Parser(s[self.i + 2:end]).seq()
                self.i = end + 1
            elif self.i + 1 < len(s) and s[self.i] == "_" and _subscript(s[self.i + 1]):
                j = self.i + 1
                while j < len(s) and (_subscript(s[j]) or s[j] == "."):  # W_Qᵀ: the mark is W_Q's, not Q's
                    j += 1
                if s[j - 1] == ".":
                    j -= 1
                sub = (_plain(s[self.i + 1:j]),)
                self.i = j
            primes += self.primes()
            for _ in range(primes):  # k_R' and S'_love are both k′ with R below it
                sym = Accent(sym, "prime")
            return Script(sym, sub=sub) if sub else sym
        if ch in "()":
            self.i += 1
            return Op(ch)
        if ch in _OPS:
            self.i += 1
            return Op(ch)
        self.i += 1
        return Word(ch)

    def primes(self) -> int:
        count = 0
        while self.i < len(self.s) and self.s[self.i] in "'′":
            self.i += 1
            count += 1
        return count

    def group(self, before: list[Node], end: int) -> Node:
        """``[q_C | q_R']``: a bracket of formulas (whatever is indexed after it comes after its ``]``)."""
        inner = _Parser(self.s[self.i + 1:end]).seq()
        self.i = end + 1
        before += [Op("["), *inner]
        return Op("]")

    def labels(self, before: list[Node]) -> Node | None:
        """``[I,0]``, ``[:,2]``, ``[love]``: an index, whose names are labels from the scenario (quoted, never parsed)."""
        end = self.s.index("]", self.i)  # balanced() made sure there is one
        inner = self.s[self.i + 1:end]
        self.i = end + 1
        before.append(Op("["))
        for n, piece in enumerate(inner.split(",")):
            if n:
                before.append(Op(","))
            if _NUMBER.fullmatch(piece) or piece == ":":
                before.append(Num(piece) if piece != ":" else Op(":"))
            elif piece:
                before.append(Word(piece))
        return Op("]")


def _open(node: Node) -> bool:
    """Whether what follows ``node`` starts afresh (after an operator or an opening bracket), not attached to it."""
    return isinstance(node, Op) and node.sym not in ")]"


def _closing(text: str, start: int) -> int:
    """The index of the ``]`` that closes the ``[`` at ``start`` (balanced() made sure there is one)."""
    depth = 0
    for k in range(start, len(text)):
        depth += {"[": 1, "]": -1}.get(text[k], 0)
        if depth == 0:
            return k
    return len(text) - 1  # pragma: no cover - balanced text closes every bracket


def _brace(text: str, start: int) -> int:
    """The index of the ``}`` closing a ``{`` at ``start`` whose inside is a formula of its own; 0 when there is none."""
    end = text.find("}", start)
    return end if text[start] == "{" and end > 0 and balanced(text[start + 1:end]) else 0


def _subscript(ch: str) -> bool:
    return ch.isalnum() and ch not in _SUBS and ch not in _SUPS


def _plain(text: str) -> Node:
    if _NUMBER.fullmatch(text):
        return Num(text)
    return Var(text) if len(text) == 1 else Word(text)


def _attach(base: Node, sub: tuple[Node, ...] = (), sup: tuple[Node, ...] = ()) -> Node:
    if isinstance(base, Script):
        return Script(base.base, base.sub + sub, base.sup + sup)
    return Script(base, sub, sup)


def parse(text: str) -> tuple[Node, ...] | None:
    """The formula's tree, or None when it is not one we can set (unbalanced brackets)."""
    if not balanced(text):
        return None
    return _Parser(text).seq()


# --- Typst ----------------------------------------------------------------------------------------


def typst_string(text: str) -> str:
    """A Typst string literal: quotes and backslashes escaped, control characters as \\u{…}."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 or 0xD800 <= ord(ch) < 0xE000:
            out.append(f"\\u{{{ord(ch):x}}}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


_TYPST_OPS = {"=": " = ", "+": " + ", "−": " - ", "-": " - ", "·": " dot.op ", "⊙": " dot.o ", "|": " bar.v ",
              "/": " slash ", ",": ", ", ":": ":", "∞": "infinity", "×": " times ", "≈": " approx ", "(": "(",
              ")": ")", "[": "[", "]": "]", " ": "\" \""}


def _typst(nodes: tuple[Node, ...]) -> str:
    out: list[str] = []
    for k, node in enumerate(nodes):
        prev = nodes[k - 1] if k else None
        if isinstance(node, Op):
            sym = node.sym
            following = nodes[k + 1] if k + 1 < len(nodes) else None
            if sym == " " and not (isinstance(following, Op) and following.sym in "(["):
                continue  # Typst sets a space of its own between an atom and a word or number: only a bracket glues
            if sym in "−-" and (prev is None or (isinstance(prev, Op) and prev.sym not in ")]")):
                out.append("-")  # a sign, not a difference
            else:
                out.append(_TYPST_OPS[sym])
            continue
        if out and not out[-1].endswith((" ", "(", "[", "-")):
            out.append(" ")  # two atoms side by side: QK, p θ
        out.append(_typst_atom(node))
    return "".join(out).strip()


def _typst_atom(node: Node) -> str:
    if isinstance(node, Op):  # a closing bracket with a power: ΣQ[I]² squares what the brackets hold
        return _TYPST_OPS[node.sym]
    if isinstance(node, Var):
        return node.name if node.name.isascii() or (node.name.isalpha() and len(node.name) == 1) else typst_string(node.name)
    if isinstance(node, Word):
        return typst_string(node.text)
    if isinstance(node, Num):
        return typst_string(node.text) if "e" in node.text else node.text  # 1e-6, not 1·e − 6
    if isinstance(node, Sqrt):
        return f"sqrt({_typst(node.body)})" if node.body else typst_string("√")  # a lone √: Typst needs a radicand
    if isinstance(node, Accent):
        if node.mark == "hat" and isinstance(node.base, Word) and len(node.base.text) > 1:  # dX̂: the hat is X's
            return f"{typst_string(node.base.text[:-1])}hat({typst_string(node.base.text[-1])})"
        inner = _typst_atom(node.base)
        return f"hat({inner})" if node.mark == "hat" else f"{inner}'"
    if isinstance(node, Script):
        text = _typst_atom(node.base)
        if isinstance(node.base, Word | Script):
            text = f"({text})" if isinstance(node.base, Script) else text
        if node.sub:
            text += f"_({_typst(node.sub)})"
        if node.sup:
            text += f"^({_typst(node.sup)})"
        return text
    return typst_string(str(node))  # pragma: no cover - every node kind is above


def to_typst(text: str) -> str:
    """``$…$`` for a formula; a quoted string (set as text) when it cannot be parsed."""
    nodes = parse(text)
    if nodes is None:
        return "#" + typst_string(text)
    return f"${_typst(nodes)}$"


# --- MathML ---------------------------------------------------------------------------------------

_MATHML_OPS = {"−": "−", "-": "−", "·": "·", "/": "/", "∞": "∞"}
_MATHML_SPACE = '<mspace width="0.22em"/>'  # a word's space the source had (math drops whitespace)


def _mathml(nodes: tuple[Node, ...]) -> str:
    out = []
    for node in nodes:
        out.append(_mathml_atom(node))
    return "".join(out)


def _mathml_atom(node: Node) -> str:
    e = html.escape
    if isinstance(node, Var):
        return f"<mi>{e(node.name)}</mi>"
    if isinstance(node, Word):
        return f'<mi mathvariant="normal">{e(node.text)}</mi>' if node.text.isalpha() else f"<mtext>{e(node.text)}</mtext>"
    if isinstance(node, Num):
        return f"<mn>{e(node.text)}</mn>"
    if isinstance(node, Op):
        if node.sym == " ":
            return _MATHML_SPACE
        sym = _MATHML_OPS.get(node.sym, node.sym)
        return f"<mi>{e(sym)}</mi>" if node.sym == "∞" else f"<mo>{e(sym)}</mo>"
    if isinstance(node, Sqrt):
        return f"<msqrt><mrow>{_mathml(node.body)}</mrow></msqrt>"
    if isinstance(node, Accent):
        if node.mark == "hat" and isinstance(node.base, Word) and len(node.base.text) > 1:  # dX̂: the hat is X's
            head, last = node.base.text[:-1], node.base.text[-1]
            return (f'<mi mathvariant="normal">{e(head)}</mi>'
                    f'<mover accent="true"><mi mathvariant="normal">{e(last)}</mi><mo>^</mo></mover>')
        inner = _mathml_atom(node.base)
        if node.mark == "hat":
            return f'<mover accent="true">{inner}<mo>^</mo></mover>'
        return f"<msup>{inner}<mo>′</mo></msup>"
    if isinstance(node, Script):
        base = _mathml_atom(node.base)
        sub = f"<mrow>{_mathml(node.sub)}</mrow>"
        sup = f"<mrow>{_mathml(node.sup)}</mrow>"
        if node.sub and node.sup:
            return f"<msubsup>{base}{sub}{sup}</msubsup>"
        return f"<msub>{base}{sub}</msub>" if node.sub else f"<msup>{base}{sup}</msup>"
    return ""  # pragma: no cover


def to_mathml(text: str, display: bool = False) -> str:
    nodes = parse(text)
    if nodes is None:
        return html.escape(text)
    mode = ' display="block"' if display else ""
    return f"<math{mode}><mrow>{_mathml(nodes)}</mrow></math>"


# --- formulas inside prose --------------------------------------------------------------------------

_MATHY = set("·√^=ᵀᵢₖ∞_²") | {_HAT}
# a setting's name (num_heads, kv_norm): code, not num with "heads" below it
IDENTIFIER = re.compile(r"[a-z]{2,}(?:_[a-z0-9]+)+")
_STOP = {"the", "a", "an", "of", "to", "and", "or", "is", "by", "in", "its", "each", "every", "with", "for", "as"}
_TRAIL = ",.;:"


def _mathy(word: str) -> bool:
    if IDENTIFIER.fullmatch(word.strip("()" + _TRAIL)):
        return False
    return any(ch in _MATHY for ch in word) or bool(re.fullmatch(r"[A-Za-z]'", word))


def _operand(word: str) -> bool:
    core = word.strip("()" + _TRAIL)
    if not core or all(ch in "=+−-·⊙|/,:×≈" for ch in core):
        return False
    if re.fullmatch(r"\w+\(\w+", core):  # softmax(scaled)
        return True
    return (_mathy(word) or bool(_NUMBER.fullmatch(core))
                           or (core.isalpha() and len(core) <= 8 and core not in _STOP))


def pieces(text: str, names: tuple[str, ...] = ()) -> list[tuple[bool, str]]:
    """The prose cut into (is_formula, text) pieces: ``X̂ = x / √(ms + eps)·γ`` and ``slope·(j − i)`` are
    formulas, the words around them are not. A run of operands joined by operators (``=``, ``+``, ``−``, ``/``)
    is one formula; a lone word is one only when it holds a math sign (``p·θᵢ``, ``W_Q``, ``Q'``). ``names``
    (tokens, head names: the scenario's words) are always text, whatever signs they hold."""
    shielded = sorted((n for n in set(names) if n and any(ch in _MATHY or ch in "'()" for ch in n)), key=len, reverse=True)
    if shielded:
        found = re.search("|".join(map(re.escape, shielded)), text)
        if found:
            before, after = text[:found.start()], text[found.end():]
            return _merge([*pieces(before, names), (False, found.group()), *pieces(after, names)])
    words = text.split(" ")
    out: list[tuple[bool, str]] = []
    k = 0
    while k < len(words):
        run_end = _run(words, k)
        if run_end > k:
            chunk = " ".join(words[k:run_end])
            tail = ""
            while chunk and chunk[-1] in _TRAIL:
                chunk, tail = chunk[:-1], chunk[-1] + tail
            # a run that swallowed one bracket of the prose around it: leave that bracket as prose
            head = ""
            if not balanced(chunk) and chunk.startswith("(") and balanced(chunk[1:]):
                head, chunk = "(", chunk[1:]
            if not balanced(chunk) and chunk.endswith(")") and balanced(chunk[:-1]):
                chunk, tail = chunk[:-1], ")" + tail
            if balanced(chunk) and chunk:
                out += [(False, head), (True, chunk), (False, tail)]
            else:
                out.append((False, head + chunk + tail))
            k = run_end
        else:
            out.append((False, words[k]))
            k += 1
        if k < len(words):
            out.append((False, " "))
    return _merge(out)


def _merge(out: list[tuple[bool, str]]) -> list[tuple[bool, str]]:
    merged: list[tuple[bool, str]] = []
    for formula, piece in out:
        if not piece:
            continue
        if merged and not formula and not merged[-1][0]:
            merged[-1] = (False, merged[-1][1] + piece)
        else:
            merged.append((formula, piece))
    return merged


def _run(words: list[str], k: int) -> int:
    """Where a formula starting at words[k] ends (k when none starts there)."""
    if not _operand(words[k]):
        return k
    end = k + 1
    j = k + 1
    while (j + 1 < len(words) and words[j] in ("=", "+", "−", "/", "·", "×", "⊙", "|")
           and words[j - 1][-1] not in _TRAIL and _operand(words[j + 1])):
        end = j + 2
        j += 2
    if end == k + 1 and not _mathy(words[k].rstrip(_TRAIL)):
        return k  # a lone plain word is prose
    return end
