"""Each CSS source parsed once per process, and each place in the widget tree styled once.

Textual gives every App a Stylesheet that parses its CSS (qkv.tcss and every widget's DEFAULT_CSS)
again, and matches every selector against every widget on each pass over the tree (mounting, and
again when the browser's page takes or loses focus): most of a first frame's CPU. Under ``--serve``
every browser tab's app is forked from the app starter, which has drawn one first frame already
(edges/serve/zygote.py): with both results kept here, a forked app finds them in the pages it
inherited, and its first frame parses and matches nothing.

Both give what Textual's own work gives:

- the parsed rules: Textual already hands the same parsed rules to every parse of one app (its
  per-stylesheet cache) and to every node they style, and never writes to them; the key holds all
  that the parse reads: the text, where it came from, its place in the cascade, the theme's variables;
- a node's matched rules: what Textual's matching reads of a node is, for it and each ancestor up to
  the app, its class (its CSS type names), id, classes and the pseudo-classes the candidate rules
  name, so those, with the rules themselves, are the key. Textual's own cache (within one pass over a
  tree) reuses a result for siblings alike in fewer of these; it is kept only for nodes it skips
  (rules naming order pseudo-classes such as :first-child), and this memo stores only results Textual
  computed for that very node.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from textual.css.model import RuleSet
from textual.css.styles import RulesMap
from textual.css.stylesheet import Stylesheet
from textual.css.types import CSSLocation
from textual.dom import DOMNode
from textual.scrollbar import ScrollBar, ScrollBarCorner
from textual.widget import Widget

# (variables, css, read_from, is_default_rules, tie_breaker, scope) -> the rules Textual parsed from it
PARSED: dict[tuple[Any, ...], list[RuleSet]] = {}
MOST_PARSED = 2048  # sources times themes; a process that somehow meets more starts the memo afresh
MOST_VERSIONS = 16  # rule lists styled from (a theme switch makes one); then the memo starts afresh


class Candidates(NamedTuple):
    """What a node's selector names make of the rules, before any matching."""

    own: tuple[str, ...]  # the pseudo-classes the candidate rules ask of the node itself (their last compound)
    above: tuple[str, ...]  # and of an ancestor (the compounds before it)
    cacheable: bool  # Textual caches the result (no order pseudo-class among them)
    hover: bool
    focus_within: bool
    order: bool
    odd_or_even: bool


class Memo:
    """Matched rules for one list of rules (kept alive here, so no other list can take its place)."""

    def __init__(self, rules: tuple[RuleSet, ...]) -> None:
        self.rules = rules
        self.candidates: dict[frozenset[str], Candidates] = {}
        self.styled: dict[tuple[Any, ...], RulesMap] = {}
        self.looks: dict[tuple[Any, ...], Any] = {}  # widgets/looks.py: a component class's look, by widget type
        self.sees_app_focus: dict[tuple[frozenset[str], frozenset[str]], bool] = {}  # by selector names, components


STYLED: dict[tuple[RuleSet, ...], Memo] = {}


class SharedStylesheet(Stylesheet):
    """Textual's Stylesheet, its parsing and matching shared by every app of the process."""

    def __init__(self, *, variables: dict[str, str] | None = None) -> None:
        super().__init__(variables=variables)
        self._variables_key: tuple[tuple[str, str], ...] | None = None
        self._memo_rules: list[RuleSet] | None = None
        self._memo: Memo | None = None
        self.app_focus_pass = False  # the next pass over nodes is the restyle of the app's focus or blur

    @classmethod
    def like(cls, stylesheet: Stylesheet) -> SharedStylesheet:
        """One that stands in for a fresh app's own (its variables, its sources: none yet)."""
        shared = cls(variables=stylesheet._variables)
        shared.source = stylesheet.source.copy()
        shared._require_parse = stylesheet._require_parse
        return shared

    def set_variables(self, variables: dict[str, str]) -> None:
        super().set_variables(variables)
        self._variables_key = None

    def _parse_rules(self, css: str, read_from: CSSLocation, is_default_rules: bool = False,
                     tie_breaker: int = 0, scope: str = "") -> list[RuleSet]:
        if self._variables_key is None:
            self._variables_key = tuple(sorted(self._variables.items()))
        key = (self._variables_key, css, read_from, is_default_rules, tie_breaker, scope)
        rules = PARSED.get(key)
        if rules is None:
            rules = super()._parse_rules(css, read_from, is_default_rules, tie_breaker, scope)
            if not any(rule.errors for rule in rules):  # CSS with errors is reported by every app, as before
                if len(PARSED) >= MOST_PARSED:
                    PARSED.clear()
                PARSED[key] = rules
        return rules

    def _current_memo(self) -> Memo:
        rules = self.rules  # parses what was added since
        if rules is not self._memo_rules or self._memo is None:
            version = tuple(rules)
            memo = STYLED.get(version)
            if memo is None:
                if len(STYLED) >= MOST_VERSIONS:
                    STYLED.clear()
                memo = STYLED[version] = Memo(version)
            self._memo_rules, self._memo = rules, memo
        return self._memo

    def _candidates(self, memo: Memo, node: DOMNode) -> Candidates:
        return self._candidates_of(memo, frozenset(node._selector_names))

    def _candidates_of(self, memo: Memo, names: frozenset[str]) -> Candidates:
        found = memo.candidates.get(names)
        if found is None:  # as Textual's apply narrows the rules, and what it derives from them
            rules_map = self.rules_map
            pseudo: set[str] = set()
            own: set[str] = set()
            above: set[str] = set()
            for name in rules_map.keys() & names:
                for rule in rules_map[name]:
                    pseudo |= rule.pseudo_classes
                    for selector_set in rule.selector_set:
                        # the last compound (selectors joined with no combinator: advance 0) is matched against
                        # the node, every selector before it against an ancestor (css/match.py)
                        selectors = selector_set.selectors
                        last = len(selectors) - 1
                        while last > 0 and selectors[last - 1].advance == 0:
                            last -= 1
                        for index, selector in enumerate(selectors):
                            (own if index >= last else above).update(selector.pseudo_classes)
            order = {"first-of-type", "last-of-type", "first-child", "last-child", "empty"}
            found = memo.candidates[names] = Candidates(
                tuple(sorted(own)), tuple(sorted(above)), pseudo.isdisjoint(self._EXCLUDE_PSEUDO_CLASSES_FROM_CACHE),
                "hover" in pseudo, "focus-within" in pseudo, not pseudo.isdisjoint(order), "odd" in pseudo or "even" in pseudo)
        return found

    def apply(self, node: DOMNode, *, animate: bool = False, cache: dict[tuple[Any, ...], RulesMap] | None = None) -> None:
        memo = self._current_memo()
        candidates = self._candidates(memo, node)
        if not candidates.cacheable:
            super().apply(node, animate=animate, cache=cache)
            return
        key = _place(node, candidates)
        known = memo.styled.get(key)
        if known is not None:  # what Textual's apply does with a result it has cached
            node._has_hover_style = candidates.hover
            node._has_focus_within = candidates.focus_within
            node._has_order_style = candidates.order
            node._has_odd_or_even = candidates.odd_or_even
            self.replace_rules(node, known, animate=animate)
            self._process_component_classes(node)
            return
        # Textual's own cache holds what it computes for this node: read it back, if it computed it here
        textual_key = (node._parent, None if node._id is None else (node._id if f"#{node._id}" in self.rules_map else None),
                       node.classes, node._pseudo_classes_cache_key, node._css_type_name)
        caught = cache if cache is not None else {}
        computed_here = textual_key not in caught
        super().apply(node, animate=animate, cache=caught)
        result = caught.get(textual_key)
        if computed_here and result is not None:
            memo.styled[key] = result

    def update_nodes(self, nodes: Iterable[DOMNode], animate: bool = False) -> None:
        if self.app_focus_pass:
            self.app_focus_pass = False
            nodes = list(nodes)
            if not any(self._sees_app_focus(node) for node in nodes):
                return  # a pass that would give every node the rules it has (and draw nothing new)
        super().update_nodes(nodes, animate=animate)

    def _sees_app_focus(self, node: DOMNode) -> bool:
        """Could a rule for this node, one of its scrollbars or component classes ask the app's :focus or :blur?

        Textual restyles the whole screen when the app takes or loses focus (a browser tab's app does both
        on its way to the first frame), as a rule may ask it of the app: App:blur HeaderTitle. What else that
        pass could see change restyles on its own (a widget's focus, hover, classes, the theme)."""
        memo = self._current_memo()
        asked = memo.sees_app_focus.get(names := (frozenset(node._selector_names), node._get_component_classes()))
        if asked is None:
            selector_names = [names[0], *(frozenset(DOMNode(classes=component)._selector_names) for component in names[1])]
            asked = memo.sees_app_focus[names] = any(
                not APP_FOCUS.isdisjoint(self._candidates_of(memo, each).above) for each in selector_names)
        if not asked and isinstance(node, Widget) and node.is_scrollable:  # the scrollbars update_nodes restyles
            asked = self._bars_see_app_focus(memo)
        return asked

    def _bars_see_app_focus(self, memo: Memo) -> bool:
        key: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset({"scrollbars"}))
        asked = memo.sees_app_focus.get(key)
        if asked is None:  # a scrollbar has no id nor classes of its own: its type names are all it is matched by
            asked = memo.sees_app_focus[key] = any(
                not APP_FOCUS.isdisjoint(self._candidates_of(memo, frozenset(
                    {"*", *(base.__name__ for base in bar._css_bases(bar))})).above)
                for bar in (ScrollBar, ScrollBarCorner))
        return asked


APP_FOCUS = frozenset({"focus", "blur"})


def looks_of(stylesheet: Stylesheet) -> dict[tuple[Any, ...], Any] | None:
    """Where widgets/looks.py keeps the looks the current rules give; None for a stylesheet not shared."""
    return stylesheet._current_memo().looks if isinstance(stylesheet, SharedStylesheet) else None


# Widget's pseudo-classes that ask the app, not the widget (the theme, inline, ANSI colours): the same for every
# widget of the tree, so asked once a node (:dark reads the theme, a list of them made anew each time)
APP_WIDE = frozenset(Widget._PSEUDO_CLASSES[name] for name in ("dark", "light", "inline", "ansi", "nocolor"))


def _place(node: DOMNode, candidates: Candidates) -> tuple[Any, ...]:
    """All that matching reads of a node and its ancestors: class, id, classes, the pseudo-classes asked of each."""
    asked: dict[Any, bool] = {}

    def has(at: Any, name: str) -> bool:  # DOMNode.has_pseudo_class
        check = at._PSEUDO_CLASSES.get(name)
        if check is None:
            return False
        if check in APP_WIDE:
            known = asked.get(check)
            if known is None:
                known = asked[check] = check(at)
            return known
        return bool(check(at))

    place: list[Any] = [type(node), node._id, frozenset(node._classes), *(has(node, name) for name in candidates.own)]
    above = candidates.above
    at: Any = node._parent
    while isinstance(at, DOMNode):
        place.append((type(at), at._id, frozenset(at._classes), *(has(at, name) for name in above)))
        at = at._parent
    return tuple(place)
