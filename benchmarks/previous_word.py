"""Where each head of glassllm:en looks: the previous token, or the previous word's first token?

    python benchmarks/previous_word.py            # a table over every head, then the built-in head's rows

The two targets are often the same key: for a word's first piece whose previous word is one token,
the token just before *is* the previous word's first token, so counting every row credits a head
twice. The measurement therefore counts only the rows where the two differ:

- a **later piece** of a word (``at`` of ``▁m at``): the token before is the word's own first piece,
  the previous word's first token is further back;
- a **first piece** after a word of several pieces (``▁and`` after ``▁m at``).

A last column counts every row with a word before its own: how often the largest weight lies
anywhere in that previous word (its first piece, its last, or one between).

Words are split by the tokenizer's own marks: a token whose label starts with ``▁`` (a space before it)
starts a word, and so does the text's first token; every other token continues the word before it
(so ``▁door .`` is one word of two pieces). A row counts for a target when that key has the row's
largest weight. The weights are glassllm's own (its Tracer's ``attn.softmax``), not qkv-tui's.

``tests/test_previous_word_claims.py`` recomputes every figure the built-in scenario's description
states, so the description cannot drift from the model.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import numpy as np

BUILTIN = "The cat sat on the mat and the dog slept by the door."
# A few everyday sentences of different shapes; the built-in's first. Evidence, not a proof: other
# sentences would give other counts.
SENTENCES = (
    BUILTIN,
    "Alice was beginning to get very tired of sitting by her sister on the bank,",
    "Once upon a time there was a little girl who lived in a village near the forest.",
    "The quick brown fox jumps over the lazy dog.",
    "She opened the window and looked at the garden below.",
    "My brother bought a new bicycle yesterday, but it was stolen this morning.",
    "The teacher asked the children to write a story about their summer holidays.",
    "In the evening we walked along the river and watched the boats.",
)
BUILTIN_HEAD = (1, 0)  # layer, head of scenarios/glassllm_previous_word.toml


def word_starts(labels: list[str]) -> list[int]:
    """For each token, the index of the first token of its word (the rule in the module docstring)."""
    starts: list[int] = []
    for i, label in enumerate(labels):
        starts.append(i if i == 0 or label.startswith("▁") else starts[i - 1])
    return starts


@dataclass(frozen=True)
class Row:
    """One query row where the previous token and the previous word's first token differ."""

    sentence: int
    index: int  # the query token
    later_piece: bool  # True: not its word's first piece
    previous: int  # the token just before
    word_first: int  # the first token of the previous word
    argmax: int  # the key with the row's largest weight


@dataclass
class HeadCount:
    """One head's rows, summed over sentences."""

    rows: list[Row] = field(default_factory=list)  # where the previous token and the previous word's first token differ
    same: int = 0  # rows where the two coincide
    same_hit: int = 0  # of them, peaking there
    with_previous_word: int = 0  # every row whose token has a word before its own
    in_previous_word: int = 0  # of them, peaking at some token of that word

    def add(self, labels: list[str], weights: np.ndarray, sentence: int = 0) -> None:
        """Count one head's (n, n) weights on one sentence."""
        starts = word_starts(labels)
        for i in range(1, len(labels)):
            own = starts[i]
            if own == 0:
                continue  # a later piece of the first word: there is no previous word
            word_first = starts[own - 1]
            top = int(np.argmax(weights[i]))
            self.with_previous_word += 1
            self.in_previous_word += word_first <= top < own
            if word_first == i - 1:
                self.same += 1
                self.same_hit += top == i - 1
            else:
                self.rows.append(Row(sentence, i, own != i, i - 1, word_first, top))

    def hits(self, target: str, later: bool | None = None) -> tuple[int, int]:
        """(rows peaking at ``target`` — "previous" or "word_first" — , rows), optionally for later or first pieces only."""
        chosen = [r for r in self.rows if later is None or r.later_piece == later]
        return sum(r.argmax == getattr(r, target) for r in chosen), len(chosen)


def attention_weights(sentences: tuple[str, ...] = SENTENCES, lang: str = "en") -> list[tuple[list[str], np.ndarray]]:
    """Per sentence: glassllm's token labels and its softmax weights, (layers, heads, n, n)."""
    import glassllm

    model, tokenizer = glassllm.load_pretrained(lang)
    out = []
    for text in sentences:
        ids = tokenizer.encode(text)
        tracer = glassllm.Tracer()
        with glassllm.no_grad():
            model.forward(ids, trace=tracer)
        layers = int(model.cfg.n_layers)
        weights = np.stack([tracer.get("attn.softmax", layer).value for layer in range(layers)])
        out.append((list(tokenizer.tokens(ids)), weights))
    return out


def survey(data: list[tuple[list[str], np.ndarray]]) -> dict[tuple[int, int], HeadCount]:
    counts: dict[tuple[int, int], HeadCount] = {}
    for s, (labels, weights) in enumerate(data):
        for layer in range(weights.shape[0]):
            for head in range(weights.shape[1]):
                counts.setdefault((layer, head), HeadCount()).add(labels, weights[layer, head], s)
    return counts


def _share(pair: tuple[int, int]) -> str:
    hit, total = pair
    return f"{hit:>3}/{total:<3} {100 * hit / total:3.0f}%" if total else "    -      "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    data = attention_weights()
    counts = survey(data)
    any_count = next(iter(counts.values()))
    print(f"glassllm:en, {len(SENTENCES)} sentences; {len(any_count.rows)} rows where the previous token and the"
          f" previous word's first token differ ({sum(r.later_piece for r in any_count.rows)} later pieces,"
          f" {sum(not r.later_piece for r in any_count.rows)} first pieces), {any_count.same} rows where they coincide")
    print("rows peaking at:  prev token (all)  prev word's 1st (all)  later pieces: prev | word's 1st"
          "  first pieces: prev | word's 1st  coinciding rows  in the previous word (all rows)")
    for (layer, head), c in sorted(counts.items()):
        print(f"  L{layer} H{head}       {_share(c.hits('previous'))}       {_share(c.hits('word_first'))}"
              f"     {_share(c.hits('previous', True))} {_share(c.hits('word_first', True))}"
              f"  {_share(c.hits('previous', False))} {_share(c.hits('word_first', False))}"
              f"  {_share((c.same_hit, c.same))}  {_share((c.in_previous_word, c.with_previous_word))}")
    labels, weights = data[0]
    layer, head = BUILTIN_HEAD
    w = weights[layer, head]
    print(f"\nL{layer} H{head} on {BUILTIN!r}, row by row (query → the key with its largest weight):")
    starts = word_starts(labels)
    for i in range(1, len(labels)):
        top = int(np.argmax(w[i]))
        own = starts[i]
        word_first = starts[own - 1] if own > 0 else None
        tag = ("previous token" if top == i - 1 else "") + (" = " if top == i - 1 == word_first else "")
        tag += "previous word's first token" if top == word_first else ""
        print(f"  {i:2} {labels[i]:>7} → {top:2} {labels[top]:>7} {w[i, top]:.2f}  {tag or 'elsewhere'}")


if __name__ == "__main__":
    main()
