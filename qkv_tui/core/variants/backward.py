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
from qkv_tui.core.variants.common import Checker, Context, Table, number, write_whole
from qkv_tui.core.variants.mla import MLA_TRAINABLE, Mla, mla_weights

BACKWARD_KEYS = ("target", "dO", "lr", "steps", "train")
DEFAULT_LR = 0.1
MAX_STEPS = 1000
# every weight the format has, in the order the default train list and the messages name them; never X,
# the ALiBi slopes, the target or [deltanet]'s given g and beta arrays, which are data, not weights
TRAINABLE = ("W_Q", "W_K", "W_V", "W_O", "W_G", "b_Q", "b_K", "b_V", "b_O", "gamma", "beta", "gamma_q", "gamma_k",
             "sinks", "W_a", "W_b", "A_log", "dt_bias", *MLA_TRAINABLE)
DELTANET_WEIGHTS = ("W_a", "W_b", "A_log", "dt_bias")  # where [deltanet] computes g and β, as Qwen3-Next does


@dataclass(frozen=True, eq=False)
class Backward:
    """What the backward pass starts from, and the training steps run on it."""

    target: Matrix | None  # (n, d_out) the wanted final output: loss = ½·Σ (output − target)²
    dO: Matrix | None  # (n, d_out) the upstream gradient of the final output, given directly (no loss)
    lr: float  # SGD's learning rate
    steps: int  # SGD steps the JSON and the Train view run (0 with dO)
    train: tuple[str, ...]  # the weights the steps update, in TRAINABLE's order
    train_given: bool = False  # the file named them (else the default, every weight it gives)


class MatrixReader(Protocol):
    def matrix(self, value: Any, key: str, labels: tuple[str, ...] = ()) -> Matrix: ...


class Reader(Checker, MatrixReader, Protocol):
    pass


def weights_of(heads: Sequence[Any], W_O: Matrix | None, b_O: Matrix | None) -> tuple[str, ...]:
    """The weight names the heads and [output] give (the tables' gains are read from the tables)."""
    have = ["W_Q", "W_K", "W_V"]
    have += [name for name in ("W_G", "b_Q", "b_K", "b_V") if any(getattr(h, name) is not None for h in heads)]
    have += [name for name, w in (("W_O", W_O), ("b_O", b_O)) if w is not None]
    if any(h.sink is not None for h in heads):
        have.append("sinks")
    return tuple(have)


def given_weights(ctx: Context) -> tuple[str, ...]:
    """The weights this scenario gives, in TRAINABLE's order: the default ``train``."""
    have = set(ctx.weights)
    if isinstance(mla := ctx.earlier.get("mla"), Mla):  # its heads' W_Q, W_K, W_V are its latent's, multiplied through
        have = {w for w in have if w not in ("W_Q", "W_K", "W_V")} | set(mla_weights(mla))
    norm, qk = ctx.earlier.get("norm"), ctx.earlier.get("qk_norm")
    if norm is not None:
        have.add("gamma")
        if getattr(norm, "beta", None) is not None:
            have.add("beta")
    if qk is not None:
        have.update(("gamma_q", "gamma_k"))
    dn = ctx.earlier.get("deltanet")
    have.update(w for w in DELTANET_WEIGHTS if dn is not None and getattr(dn, w, None) is not None)
    return tuple(w for w in TRAINABLE if w in have)


def parse_backward(table: dict[str, Any], ctx: Context) -> Backward:
    v: Reader = ctx.v  # type: ignore[assignment]  # the loader's validator reads matrices too
    if getattr(ctx.earlier.get("deltanet"), "io", None) is not None:  # no gradients through them yet
        raise v.fail("[backward] with [deltanet]'s short convolution or gated output norm (conv_q …, W_Z) is not"
                     " supported yet; remove [backward] or those keys")
    n, d_out = len(ctx.tokens), ctx.d_out
    has_target, has_dO = "target" in table, "dO" in table
    if has_target and has_dO:
        raise v.fail("[backward] has both target and dO; expected exactly one: target (the wanted output, loss ="
                     " ½·Σ (output − target)²) or dO (the gradient of the output itself)")
    if not has_target and not has_dO:
        raise v.fail("[backward] needs target = [[...]] (the wanted output, loss = ½·Σ (output − target)²)"
                     " or dO = [[...]] (the gradient of the output itself); expected exactly one")
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
    have = given_weights(ctx)
    train, train_given = have, "train" in table
    if train_given:
        train = _train(v, table["train"], have)
    return Backward(given if has_target else None, given if has_dO else None, lr, steps, train, train_given)


def _train(v: Checker, raw: Any, have: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(w, str) for w in raw):
        raise v.fail(f"[backward] train must be a list of weight names such as [\"W_Q\", \"W_K\"], got {_kind(raw)}")
    for name in raw:
        if name not in TRAINABLE:
            # a name in the wrong case first: difflib reads W_dkv as nearer W_V than W_DKV
            hint = ([w for w in TRAINABLE if w.lower() == name.lower()]
                    or difflib.get_close_matches(name, TRAINABLE, n=1, cutoff=0.5))
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise v.fail(f"[backward] train names {_show(name)}, which is not a weight; expected names from:"
                         f" {', '.join(TRAINABLE)}{extra}")
        if name not in have:
            raise v.fail(f"[backward] train names {name!r}, but this scenario has no {name}; expected names of the"
                         f" weights it gives: {', '.join(have)}")
    return tuple(w for w in TRAINABLE if w in raw)


def write_backward(bw: Backward) -> list[str]:
    """The defaults stay unwritten (lr, steps, the train list), so the file says what was chosen."""
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
    return lines


def _summary(bw: Backward) -> str:
    if bw.target is None:
        return "backward from dO"
    return f"backward, {bw.steps} step{'' if bw.steps == 1 else 's'}" if bw.steps else "backward"


TABLE: Table[Backward] = Table("backward", BACKWARD_KEYS, parse_backward, _summary, write_backward)
