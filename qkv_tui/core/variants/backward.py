"""``[backward]``: the backward pass, a loss on the final output (or its gradient given directly) and the
SGD steps that train on it (docs/scenario-format.md, "[backward]"; docs/backward.md)."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.arrays import Matrix
from qkv_tui.core.toml_text import number as _number
from qkv_tui.core.toml_text import string, vector
from qkv_tui.core.variants import backward_table
from qkv_tui.core.variants.backward_table import BACKWARD_KEYS as BACKWARD_KEYS
from qkv_tui.core.variants.backward_table import weights_of as weights_of
from qkv_tui.core.variants.common import Checker, Context, Table, Trains, number, write_whole

DEFAULT_LR = 0.1
LOSSES = ("squared", "cross_entropy")
OPTIMIZERS = ("sgd", "adamw")
ADAMW_KEYS = ("betas", "eps", "weight_decay")
# torch.optim.AdamW's defaults, so a file that names only the optimizer runs the step torch runs
DEFAULT_BETAS = (0.9, 0.999)
DEFAULT_EPS = 1e-8
DEFAULT_WEIGHT_DECAY = 0.01
MAX_STEPS = 1000
# the layer's own weights, in the order the default train list and the messages name them; each variant's go at
# its place among them (its Trains, core/variants/common.py), and the unembedding W_U last. Never X, the ALiBi
# slopes, the target or a table's given arrays, which are data, not weights
LAYER_WEIGHTS = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")


@dataclass(frozen=True, eq=False)
class Backward:
    """What the backward pass starts from, and the training steps run on it."""

    target: Matrix | None  # (n, d_out) the wanted final output: loss = ½·Σ (output − target)²
    dO: Matrix | None  # (n, d_out) the upstream gradient of the final output, given directly (no loss)
    lr: float  # SGD's learning rate
    steps: int  # SGD steps the JSON and the Train view run (0 with dO)
    train: tuple[str, ...]  # the weights the steps update, in trainable()'s order
    train_given: bool = False  # the file named them (else the default, every weight it gives)
    loss: str = "squared"  # LOSSES: ½·Σ (output − target)², or cross-entropy through W_U against ``next``
    W_U: Matrix | None = None  # (d_out, vocab) the unembedding: logits = output·W_U; cross_entropy only
    next: tuple[int, ...] | None = None  # (n,) each token's target id in the vocabulary; cross_entropy only
    optimizer: str = "sgd"  # OPTIMIZERS
    betas: tuple[float, float] = DEFAULT_BETAS  # AdamW's β₁ (m's decay) and β₂ (v's)
    eps: float = DEFAULT_EPS  # AdamW's ε in √v̂ + ε
    weight_decay: float = DEFAULT_WEIGHT_DECAY  # AdamW's decoupled decay: p ← p − lr·wd·p

    @property
    def cross_entropy(self) -> bool:
        return self.loss == "cross_entropy"

    @property
    def adamw(self) -> bool:
        return self.optimizer == "adamw"


class MatrixReader(Protocol):
    def matrix(self, value: Any, key: str, labels: tuple[str, ...] = ()) -> Matrix: ...


class Reader(Checker, MatrixReader, Protocol):
    pass


def trainable(trains: Sequence[Trains]) -> tuple[str, ...]:
    """Every weight the format has, in the order the default train list and the messages name them: the layer's own,
    each variant's after the one its Trains names (in FEATURES order), those placed at the end, then W_U."""
    out: list[str] = []
    for own in LAYER_WEIGHTS:
        out.append(own)
        out += [name for t in trains if t.after == own for name in t.names if name not in out]
    out += [name for t in trains if t.after == "" for name in t.names if name not in out]
    return (*out, "W_U")


def given_weights(ctx: Context) -> tuple[str, ...]:
    """The weights this scenario gives, in trainable()'s order: the default ``train``."""
    given = [(t, t.given(ctx)) for t in ctx.trains]
    have = set(ctx.weights)
    for t, names in given:  # a latent layer's heads' W_Q, W_K, W_V are its own weights, multiplied through
        if names:
            have -= set(t.instead)
    have.update(name for _, names in given for name in names)
    return tuple(w for w in trainable(ctx.trains) if w in have) + ctx.trainable  # then the tables parsed after


def parse_backward(table: dict[str, Any], ctx: Context) -> Backward:
    v: Reader = ctx.v  # type: ignore[assignment]  # the loader's validator reads matrices too
    for t in ctx.trains:  # what a variant cannot be read back through yet
        why = None if t.refuse is None else t.refuse(ctx)
        if why is not None:
            raise v.fail(why)
    n, d_out = len(ctx.tokens), ctx.d_out
    loss = _choice(v, table, "loss", LOSSES, "squared", "the loss on the final output")
    if loss == "cross_entropy":
        W_U, nxt = _cross_entropy(v, table, ctx)
        has_target, has_dO, given = False, False, None
    else:
        for key in ("W_U", "next"):
            if key in table:
                raise v.fail(f"[backward] {key} is given without loss = \"cross_entropy\"; expected loss ="
                             f" \"cross_entropy\" (logits = output·W_U, next = each token's target id), or no {key}")
        W_U, nxt = None, None
        has_target, has_dO = "target" in table, "dO" in table
        if has_target and has_dO:
            raise v.fail("[backward] has both target and dO; expected exactly one: target (the wanted output, loss ="
                         " ½·Σ (output − target)²) or dO (the gradient of the output itself)")
        if not has_target and not has_dO:
            raise v.fail("[backward] needs target = [[...]] (the wanted output, loss = ½·Σ (output − target)²)"
                         " or dO = [[...]] (the gradient of the output itself), or loss = \"cross_entropy\" with W_U"
                         " and next; expected exactly one")
        key = "target" if has_target else "dO"
        given = v.matrix(table[key], f"[backward] {key}", ctx.tokens)
        if given.shape != (n, d_out):
            what = "the final output's" if ctx.has_W_O else "the final output's (the heads' d_v side by side, no W_O)"
            raise v.fail(f"[backward] {key} is {given.shape[0]} × {given.shape[1]}; expected {what} shape,"
                         f" n × d_out = {n} × {d_out}")
    lr = DEFAULT_LR
    if "lr" in table:
        lr = number(v, table["lr"], "[backward] lr")
        if lr <= 0:
            raise v.fail(f"[backward] lr = {_show(table['lr'])}; expected a finite number > 0 (the step size of SGD)")
    steps = 0
    if "steps" in table:
        raw = table["steps"]
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise v.fail(f"[backward] steps must be a whole number from 0 to {MAX_STEPS}, got {_kind(raw)}"
                         f"{write_whole(raw, 0, MAX_STEPS)}")
        if raw < 0:
            raise v.fail(f"[backward] steps = {raw}; expected a whole number from 0 to {MAX_STEPS}")
        if raw > MAX_STEPS:
            raise v.fail(f"[backward] steps = {raw} is above the limit; expected at most {MAX_STEPS:,} training steps")
        steps = raw
    if steps and has_dO:
        raise v.fail(f"[backward] steps = {steps} with dO; training needs a loss to fall, so give target"
                     " instead of dO, or steps = 0")
    have = given_weights(ctx) + (("W_U",) if W_U is not None else ())
    train, train_given = have, "train" in table
    if train_given:
        train = _train(v, table["train"], have, trainable(ctx.trains), ctx.trainable)
    optimizer = _choice(v, table, "optimizer", OPTIMIZERS, "sgd", "the training steps' update rule")
    if optimizer != "adamw":
        for key in ADAMW_KEYS:
            if key in table:
                raise v.fail(f"[backward] {key} is given without optimizer = \"adamw\"; expected optimizer = \"adamw\""
                             f" (SGD has no {key}), or no {key}")
    betas, eps, decay = _adamw(v, table) if optimizer == "adamw" else (DEFAULT_BETAS, DEFAULT_EPS, DEFAULT_WEIGHT_DECAY)
    return Backward(given if has_target else None, given if has_dO else None, lr, steps, train, train_given,
                    loss, W_U, nxt, optimizer, betas, eps, decay)


def _choice(v: Checker, table: dict[str, Any], key: str, allowed: tuple[str, ...], default: str, what: str) -> str:
    if key not in table:
        return default
    raw = table[key]
    if raw not in allowed:
        names = " or ".join(f"\"{a}\"" for a in allowed)
        raise v.fail(f"[backward] {key} = {_show(raw)}; expected {names} ({what})")
    return str(raw)


def _cross_entropy(v: Reader, table: dict[str, Any], ctx: Context) -> tuple[Matrix, tuple[int, ...]]:
    """W_U (d_out × vocab) and next (n token ids below vocab), each checked against the other and the output."""
    n, d_out = len(ctx.tokens), ctx.d_out
    for key in ("target", "dO"):
        if key in table:
            raise v.fail(f"[backward] {key} is given with loss = \"cross_entropy\"; expected W_U and next instead"
                         " (the loss is −ln p of each next token), or no loss key for ½·Σ (output − target)²")
    for key, what in (("W_U", "the unembedding, d_out × vocab: logits = output·W_U"),
                      ("next", "each token's target id in the vocabulary, one per token")):
        if key not in table:
            raise v.fail(f"[backward] loss = \"cross_entropy\" needs {key} ({what})")
    W_U = v.matrix(table["W_U"], "[backward] W_U")
    if W_U.shape[0] != d_out:
        what = "the final output's width" if ctx.has_W_O else "the final output's width (the heads' d_v side by side)"
        raise v.fail(f"[backward] W_U is {W_U.shape[0]} × {W_U.shape[1]}; expected d_out × vocab with d_out = {d_out},"
                     f" {what}")
    vocab = W_U.shape[1]
    if vocab < 2:
        raise v.fail(f"[backward] W_U is {W_U.shape[0]} × {vocab}; expected a vocabulary of at least 2 columns (with"
                     " one, p = 1 and the loss is 0 whatever the weights)")
    raw = table["next"]
    if not isinstance(raw, list) or len(raw) != n:
        got = f"{len(raw)} items" if isinstance(raw, list) else _kind(raw)
        raise v.fail(f"[backward] next must be a list of {n} token ids, one per token, got {got}")
    ids: list[int] = []
    for i, item in enumerate(raw):
        if isinstance(item, bool) or not isinstance(item, int):
            raise v.fail(f"[backward] next item {i + 1} ({ctx.tokens[i]}) must be a whole number from 0 to {vocab - 1},"
                         f" got {_kind(item)}{write_whole(item, 0, vocab - 1)}")
        if not 0 <= item < vocab:
            raise v.fail(f"[backward] next item {i + 1} ({ctx.tokens[i]}) = {item} is outside the vocabulary;"
                         f" expected an id from 0 to {vocab - 1} (W_U has {vocab} columns)")
        ids.append(item)
    return W_U, tuple(ids)


def _adamw(v: Checker, table: dict[str, Any]) -> tuple[tuple[float, float], float, float]:
    betas = DEFAULT_BETAS
    if "betas" in table:
        raw = table["betas"]
        if not isinstance(raw, list) or len(raw) != 2:
            raise v.fail(f"[backward] betas must be a list of 2 numbers [β₁, β₂], got {_kind(raw)}")
        b1, b2 = (number(v, x, f"[backward] betas item {i + 1}") for i, x in enumerate(raw))
        for i, b in enumerate((b1, b2)):
            if not 0 <= b < 1:
                raise v.fail(f"[backward] betas item {i + 1} = {_show(raw[i])}; expected a number from 0 up to (not"
                             " including) 1 (the moment's decay per step)")
        betas = (b1, b2)
    eps = DEFAULT_EPS
    if "eps" in table:
        eps = number(v, table["eps"], "[backward] eps")
        if eps <= 0:
            raise v.fail(f"[backward] eps = {_show(table['eps'])}; expected a finite number > 0 (added to √v̂ so the"
                         " step never divides by 0)")
    decay = DEFAULT_WEIGHT_DECAY
    if "weight_decay" in table:
        decay = number(v, table["weight_decay"], "[backward] weight_decay")
        if decay < 0:
            raise v.fail(f"[backward] weight_decay = {_show(table['weight_decay'])}; expected a finite number ≥ 0")
    return betas, eps, decay


def _train(v: Checker, raw: Any, have: tuple[str, ...], every: tuple[str, ...], own: tuple[str, ...] = ()) -> tuple[str, ...]:
    """``every``: trainable()'s names; ``own``: the names the tables parsed after [backward] add (Context.trainable),
    known here only where given."""
    if not isinstance(raw, list) or not all(isinstance(w, str) for w in raw):
        raise v.fail(f"[backward] train must be a list of weight names such as [\"W_Q\", \"W_K\"], got {_kind(raw)}")
    known = every + tuple(w for w in own if w not in every)
    for name in raw:
        if name not in known:
            # a name in the wrong case first: difflib reads W_dkv as nearer W_V than W_DKV
            hint = ([w for w in known if w.lower() == name.lower()]
                    or difflib.get_close_matches(name, known, n=1, cutoff=0.5))
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise v.fail(f"[backward] train names {_show(name)}, which is not a weight; expected names from:"
                         f" {', '.join(known)}{extra}")
        if name not in have:
            raise v.fail(f"[backward] train names {name!r}, but this scenario has no {name}; expected names of the"
                         f" weights it gives: {', '.join(have)}")
    return tuple(w for w in known if w in raw)


def write_backward(bw: Backward) -> list[str]:
    """The defaults stay unwritten (lr, steps, the train list), so the file says what was chosen."""
    if bw.cross_entropy:
        assert bw.W_U is not None and bw.next is not None
        rows = "".join(f"  {vector(row)},\n" for row in bw.W_U.tolist())
        lines = ["[backward]", 'loss = "cross_entropy"', f"W_U = [\n{rows}]",
                 f"next = [{', '.join(str(i) for i in bw.next)}]"]
    else:
        key = "target" if bw.target is not None else "dO"
        given = bw.target if bw.target is not None else bw.dO
        assert given is not None
        rows = "".join(f"  {vector(row)},\n" for row in given.tolist())
        lines = ["[backward]", f"{key} = [\n{rows}]"]
    if bw.lr != DEFAULT_LR:
        lines.append(f"lr = {_number(bw.lr)}")
    if bw.steps:
        lines.append(f"steps = {bw.steps}")
    if bw.train_given:
        lines.append(f"train = [{', '.join(string(w) for w in bw.train)}]")
    if bw.adamw:
        lines += ['optimizer = "adamw"', f"betas = [{_number(bw.betas[0])}, {_number(bw.betas[1])}]",
                  f"eps = {_number(bw.eps)}", f"weight_decay = {_number(bw.weight_decay)}"]
    return lines


def _summary(bw: Backward) -> str:
    if bw.target is None and not bw.cross_entropy:
        return "backward from dO"
    loss = ", cross-entropy" if bw.cross_entropy else ""
    rule = " of AdamW" if bw.adamw else ""
    return f"backward{loss}, {bw.steps} step{'' if bw.steps == 1 else 's'}{rule}" if bw.steps else f"backward{loss}"


# registered in backward_table.py, whose functions are this module's (a scenario without the table loads only that)
TABLE: Table[Backward] = backward_table.TABLE
