"""The Train view (l) as plain data: one SGD (or AdamW) step of the scenario's [backward] per step of the view, with
the loss falling, the weights each step moved and the attention map beside step 0's (teach/train_walk.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.fmt import fmt
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.core.variants.backward import Backward
from qkv_tui.display import side_views
from qkv_tui.display.frame import Frame
from qkv_tui.display.modes import Modes
from qkv_tui.display.side_view import Sources
from qkv_tui.display.view import Explanation, PaneSpec
from qkv_tui.display.view import matrix_pane as _pane
from qkv_tui.teach.arith import fit
from qkv_tui.teach.handcalc import round_to
from qkv_tui.teach.summary import weights_note
from qkv_tui.teach.train_walk import Move, Param, TrainRun

SHOWN_MOVES = 3  # the step's biggest updates worked out; the panes mark every moved cell
HISTORY = 8  # the loss history's most recent steps in the explanation; the pane holds them all

MEANING = ("One step of gradient descent: every trained weight moves against its gradient, w ← w − lr·∂loss/∂w,"
           " with the gradients the Backward stages compute for the weights as they stand. A small lr takes small,"
           " safe steps; too large a step overshoots and the loss can rise. Watch the attention map: as the weights"
           " the scores are made of move, where each token looks changes.")  # not "W_Q and W_K": [mla] trains W_UK
ADAMW_MEANING = ("One step of AdamW, as torch.optim.AdamW takes it: each trained weight keeps two running averages"
                 " of its gradient g, m (of g) and v (of g²); m̂ and v̂ undo their start at 0, and the weight moves by"
                 " lr·m̂/(√v̂ + ε), about lr whatever the gradient's size, in the direction its recent gradients"
                 " agree on; the decoupled weight decay also shrinks it by lr·wd·w. Watch the first step: every"
                 " trained cell moves by nearly lr, since m̂/√v̂ = g/|g| at t = 1. Watch the attention map too: as the"
                 " weights the scores are made of move, where each token looks changes.")
ADAMW_RULE = "w ← w − lr·wd·w − lr·m̂/(√v̂ + ε)"
NO_BACKWARD = ("The Train view runs SGD steps on a [backward] table: a target for the output (the loss), lr, steps"
               " and the weights to train (docs/scenario-format.md, \"[backward]\"). This scenario has none;"
               " learn_to_look is a built-in that has one.")
NO_STEPS = ("[backward] steps = 0: there is nothing to train. Give steps = N (at most 1,000) and a target"
            " (with dO given directly there is no loss, so no steps).")


SYNC_STEPS = 10  # steps the view computes itself on a key (at most ~0.2 s by hand); further, the app's worker does


class SteppedRun(TrainRun):
    """A run the screen reads while a worker thread (ui/train_steps.py) may compute its later steps: the
    screen asks only for steps already computed, or a few more when no worker runs, so a key that asks
    for step 1,000 never blocks the app (1,000 steps by hand took ~18 s of CPU)."""

    busy = False  # a worker is computing steps: only it calls at() beyond what is computed
    held = 0  # the step the screen shows meanwhile (the last in hand when the worker began): its panes stay put

    @property
    def computed(self) -> int:
        """How many states (train[0] …) are in hand."""
        return len(self._kept)

    @property
    def stopped(self) -> bool:
        """Every state is in hand, or a step overflowed (no later state will come)."""
        return self.error is not None or self.computed >= len(self)

    def ready(self, k: int) -> int:
        """The step the screen can show for ``k`` without waiting: k itself when in hand (or a few steps
        away and no worker runs), else the last step computed."""
        if self.stopped or k < self.computed or (not self.busy and k < self.computed + SYNC_STEPS):
            return k
        if self.busy:  # the same step until the run is there: a redraw for its progress lays nothing out again
            return min(self.held, max(self.computed - 1, 0))
        return max(self.computed - 1, 0)


def _run(sources: Sources, modes: Modes) -> SteppedRun | None:
    """The exact run, or under h the run by hand at the shown decimals (teach/train_walk.py), each kept."""
    sc = sources.comp.scenario
    if sc.backward is None or sc.backward.steps == 0:
        return None
    if modes.hand:
        return sources.kept(("train", "hand", modes.decimals), lambda: SteppedRun(sc, modes.decimals))
    return sources.kept(("train",), lambda: SteppedRun(sc))


def pending(sources: Sources, modes: Modes) -> tuple[SteppedRun, int] | None:
    """The run and the step the open Train view asks for, where that step is not computed and too far to
    compute on a key: the app computes up to it in a worker. None otherwise."""
    if modes.view != VIEW.name:
        return None
    run = _run(sources, modes)
    if run is None:
        return None
    step = min(modes.side_step, len(run) - 1)
    return (run, step) if run.ready(step) < step else None


def computing_line(run: SteppedRun, step: int) -> str:
    """What the screen says while the steps up to ``step`` are computed."""
    how = " by hand" if run.hand is not None else ""
    return (f"computing the steps{how} up to step {step}: {max(run.computed - 1, 0)} done; esc stops there"
            " (and shows it), q quits")


def _steps(sources: Sources, modes: Modes, head: int) -> int:
    run = _run(sources, modes)
    return 1 if run is None else len(run)


def _moved(now: Matrix, then: Matrix, decimals: int) -> frozenset[tuple[int, int]]:
    """The cells that moved most since step 0: they read differently at the shown decimals, by at least half
    the largest change (after a few steps every cell has moved a little; marking them all would say nothing)."""
    delta = np.abs(now - then)
    diff = (round_to(now, decimals) != round_to(then, decimals)) & (delta >= 0.5 * delta.max(initial=0.0))
    return frozenset((int(r), int(c)) for r, c in zip(*np.nonzero(diff), strict=True))


def update_line(move: Move, lr: float, single_row: bool, decimals: int) -> str:
    """``W_Q[2,0] = 1 − 0.5·0.413 = 0.794``: the update, checkable on a calculator."""
    texts, new = fit(lambda w, g: w - lr * g, [move.old, move.grad], move.new, decimals)
    return f"{move.cell(single_row)} = {texts[0]} − {lr:g}·{texts[1]} = {new}"


def adamw_lines(move: Move, bw: Backward, single_row: bool, decimals: int) -> list[str]:
    """AdamW's step for one cell, each line checkable on a calculator from the numbers it shows:
    m, v, their bias corrections m̂ and v̂, then the weight."""
    a = move.adam
    assert a is not None
    b1, b2 = bw.betas
    cell = move.cell(single_row)
    g = fmt(move.grad, False, decimals)
    mt, m = fit(lambda m0, g: b1 * m0 + (1 - b1) * g, [a.m0, move.grad], a.m, _sig(a.m, decimals))
    vt, v = fit(lambda v0, g: b2 * v0 + (1 - b2) * g * g, [a.v0, move.grad], a.v, _sig(a.v, decimals))
    c1, c2 = 1 - b1 ** a.t, 1 - b2 ** a.t
    # the correction 1 − βᵗ is keyed in from the shown β and t: its digits are 8 significant, all a step needs
    ht, m_hat = fit(lambda m: m / c1, [a.m], a.m_hat, _sig(a.m_hat, decimals))
    wt, v_hat = fit(lambda v: v / c2, [a.v], a.v_hat, _sig(a.v_hat, decimals))
    return [
        f"g = ∂loss/∂{cell} = {g}",
        f"m = β₁·m + (1 − β₁)·g = {b1:g}·{paren(mt[0])} + {1 - b1:g}·{paren(mt[1])} = {m}",
        f"v = β₂·v + (1 − β₂)·g·g = {b2:g}·{vt[0]} + {1 - b2:g}·{paren(vt[1])}·{paren(vt[1])} = {v}",
        f"m̂ = m / (1 − β₁^t) = {paren(ht[0])} / (1 − {b1:g}^{a.t}) = {paren(ht[0])} / {c1:.8g} = {m_hat}",
        f"v̂ = v / (1 − β₂^t) = {wt[0]} / (1 − {b2:g}^{a.t}) = {wt[0]} / {c2:.8g} = {v_hat}",
        adamw_update_line(move, bw, single_row, decimals),
    ]


SCORED = frozenset({"X", "W_Q", "W_K", "b_Q", "b_K"})  # the train names a head's q and k are made of


def _sig(x: float, decimals: int) -> int:
    """Decimals that show at least two significant digits of x (v is often 1e-5: at 3 decimals it would read 0)."""
    if x == 0 or not np.isfinite(x):
        return decimals
    return max(decimals, 1 - int(np.floor(np.log10(abs(x)))))


def adamw_update_line(move: Move, bw: Backward, single_row: bool, decimals: int) -> str:
    """``W_Q[1,0] = w − lr·wd·w − lr·m̂ / (√v̂ + ε) = 1 − 0.1·0.01·1 − 0.1·0.41 / (√0.17 + 1e-08) = 0.899``."""
    a = move.adam
    assert a is not None
    lr, wd, eps = bw.lr, bw.weight_decay, bw.eps
    texts, new = fit(lambda w, mh, vh: w - lr * wd * w - lr * mh / (vh ** 0.5 + eps), [move.old, a.m_hat, a.v_hat],
                     move.new, decimals)
    w, mh, vh = texts
    return (f"{move.cell(single_row)} = w − lr·wd·w − lr·m̂ / (√v̂ + ε) = {w} − {lr:g}·{wd:g}·{paren(w)}"
            f" − {lr:g}·{paren(mh)} / (√{vh} + {eps:g}) = {new}")


def paren(text: str) -> str:
    """A negative operand in parentheses after a sign or a product: ``0.9·(-0.2)``."""
    return f"({text})" if text.startswith("-") else text


def _tables_trained(run: TrainRun, k: int, head: int, decimals: int) -> list[str]:
    """What a table's trained vectors make, at step 0 and now, in its own words ([differential]'s λ): a table
    whose value answers ``trained_note`` (its value at step 0, the head, the decimals) adds a line."""
    from qkv_tui.core import variants

    lines = []
    for table in variants.TABLES:
        now, first = table.of(run.at(k).scenario), table.of(run.at(0).scenario)
        note = getattr(now, "trained_note", None)
        if note is not None and first is not None:
            lines.append(note(first, head, run.scenario.heads[head].name, decimals))
    return lines


def _meaning(sc: Scenario) -> str:
    """The view's words; a state head's map holds no attention, only the weights its q·k put on δ (or V)."""
    if sc.backward is not None and sc.backward.adamw:
        return ADAMW_MEANING
    if not weights_note(sc):
        return MEANING
    weighed = ask.scenario_says(sc, "weighed") or "V"
    trained = sc.backward.train if sc.backward is not None else ()
    # only the λ vectors train in differential_learns: no weight q or k is made of moves there
    moving = ("the weights q and k are made of move" if set(trained) & SCORED else
              f"the trained weights ({', '.join(trained)}) move")
    return MEANING.replace("Watch the attention map: as the weights the scores are made of move, where each token looks"
                           " changes.", f"Watch the map: as {moving}, so does how much each"
                           f" token weighs each {weighed}{weights_note(sc)}.")


def _loss_line(losses: list[float | None], k: int, decimals: int, cross_entropy: bool = False) -> str:
    now = losses[k]
    assert now is not None
    if k == 0:
        said = "mean over the tokens of −ln p[next]" if cross_entropy else "½·Σ (output − target)²"
        return f"step 0: the file's weights; loss = {said} = {fmt(now, False, decimals)}"
    before = losses[k - 1]
    assert before is not None
    # a plain difference: the shown operands must give the shown change exactly, as on a calculator
    # a change too small for the shown decimals gets the digits that show it: "0.000 − 0.000 = 0.000; the loss
    # fell" said nothing true
    places = _sig(now - before, decimals) if float(fmt(now - before, False, decimals)) == 0 else decimals
    texts, change = fit(lambda a, b: b - a, [before, now], now - before, places, plain_sum=True)
    word = "fell" if now < before else "rose" if now > before else "stayed where it was"
    return f"Δloss = {texts[1]} − {texts[0]} = {change}; step {k}: the loss {word}"


def _single(p: Param) -> bool:
    return bool(p.value.shape[0] == 1)


def train_explanation(run: TrainRun, k: int, head: int, decimals: int) -> Explanation:
    sc = run.scenario
    k = run.reached(k)
    losses = run.losses(k)
    shapes = {p.name: _single(p) for p in run.params(0)}
    details: list[str] = []
    bw = run.backward
    if k > 0:
        moves = run.moves(k)
        names = ", ".join(sorted({m.param for m in moves}, key=[p.name for p in run.params(0)].index)) or "nothing"
        if bw.adamw:
            b1, b2 = bw.betas
            details.append(f"AdamW, lr = {run.lr:g}, β₁ = {b1:g}, β₂ = {b2:g}, ε = {bw.eps:g}, weight decay ="
                           f" {bw.weight_decay:g}, t = {k}, with step {k - 1}'s gradients; moved: {names}"
                           f" ({len(moves)} cells); the biggest:")
            for i, m in enumerate(moves[:SHOWN_MOVES]):
                if i == 0:
                    details += [f"  {line}" for line in adamw_lines(m, bw, shapes[m.param], decimals)]
                else:
                    details.append(f"  {adamw_update_line(m, bw, shapes[m.param], decimals)}")
        else:
            details.append(f"w ← w − lr·∂loss/∂w, lr = {run.lr:g}, with step {k - 1}'s gradients; moved: {names}"
                           f" ({len(moves)} cells); the biggest:")
            details += [f"  {update_line(m, run.lr, shapes[m.param], decimals)}" for m in moves[:SHOWN_MOVES]]
        details += _tables_trained(run, k, head, decimals)
        total = run.since_start(k)[:SHOWN_MOVES]
        if total:
            details.append("moved most since step 0: " + " · ".join(
                f"{m.cell(shapes[m.param])} {fmt(m.old, False, decimals)} → {fmt(m.new, False, decimals)}"
                for m in total))
    start = max(0, k + 1 - HISTORY)
    history = " · ".join(f"{s} {fmt(v, False, decimals)}" for s, v in enumerate(losses) if s >= start and v is not None)
    details.append(f"loss by step: {'… · ' if start else ''}{history}")
    now, first = run.at(k).weights[head], run.at(0).weights[head]
    if k > 0:
        delta = np.where(sc.allow, now - first, 0.0)
        r, c = np.unravel_index(int(np.argmax(np.abs(delta))), delta.shape)
        top = sc.key_labels[int(np.argmax(now[r]))]
        if weights_note(sc):  # a state head's weights weigh δ (or V unnormalised): no attention to move
            weighed = ask.scenario_says(sc, "weighed") or "V"
            what, most = f"the weight on {weighed} moved most{weights_note(sc)}", f"weighs the {weighed} of \"{top}\" most"
        else:
            what, most = "attention moved most", f"looks most at \"{top}\""
        # the tokens quoted where they are words of the sentence: "the" weighs the V of "the" most
        details.append(f"{what}: {sc.labels[r]} → {sc.key_labels[c]},"
                       f" {fmt(float(first[r, c]), False, decimals)} at step 0, {fmt(float(now[r, c]), False, decimals)}"
                       f" now; \"{sc.labels[r]}\" {most}")
    if run.error is not None and run.reached(run.total) < run.total:
        details.append(f"the run stops at step {run.reached(run.total)}: {run.error}")
    heads = len(sc.heads)
    return Explanation(
        stage_label=f"step {k}/{run.total}",
        counter=f"loss {fmt(losses[k] or 0.0, False, decimals)}",
        head_label=f"{sc.heads[head].name} ({head + 1}/{heads})" if heads > 1 else "",
        arithmetic=_loss_line(losses, k, decimals, bw.cross_entropy),
        details=tuple(details),
        meaning=_meaning(sc),
        formula=((ADAMW_RULE if bw.adamw else "w ← w − lr·∂loss/∂w", k > 0),),
    )


def train_panes(run: TrainRun, k: int, head: int, decimals: int) -> tuple[list[PaneSpec], list[PaneSpec]]:
    sc = run.scenario
    k = run.reached(k)
    name = sc.heads[head].name if len(sc.heads) > 1 else ""
    now, first = run.at(k).weights[head], run.at(0).weights[head]
    moved = _moved(now, first, decimals)
    rows, cols = sc.labels, sc.key_labels
    focus = [
        _pane("train_P", f"P, step {k}", now, rows, cols, decimals, subtitle=name, heat=True,
              changed=moved, allow=sc.allow),
        _pane("train_P0", "P, step 0", first, rows, cols, decimals, subtitle=name, heat=True,
              allow=sc.allow),
    ]
    # every step's row from the start, filled as the steps are reached: the pane keeps its size, so a step
    # redraws cells and lays nothing out again
    losses = np.zeros((len(run), 1))  # (steps + 1, 1)
    losses[:k + 1, 0] = [v if v is not None else np.nan for v in run.losses(k)]
    focus.append(_pane("train_loss", "loss by step", losses, tuple(str(s) for s in range(len(run))), ("loss",),
                       decimals, current=(k, 0), filled=k + 1))
    extra: list[PaneSpec] = []
    biggest = run.moves(k)[:1]
    for p0, p in zip(run.params(0), run.params(k), strict=True):
        if not run.trainable(p) or (p.head is not None and p.head != head):
            continue
        changed = _moved(p.value, p0.value, decimals)
        current = None
        if biggest and biggest[0].param == p.name:
            current = (biggest[0].row, biggest[0].col)
        labels = tuple(str(c) for c in range(p.value.shape[1]))
        pane = _pane(f"train_{p.name}", f"{p.name}, step {k}", p.value,
                     tuple(str(r) for r in range(p.value.shape[0])), labels, decimals, changed=changed,
                     current=current)
        extra.append(pane)  # beside the map where there is room; always in the same order, so nothing moves
    return focus, extra


def _frame(sources: Sources, modes: Modes, step: int, head: int) -> Frame:
    run = _run(sources, modes)
    if run is None:
        sc = sources.comp.scenario
        text = NO_BACKWARD if sc.backward is None else NO_STEPS
        ex = Explanation(stage_label="Train", counter="", head_label="", arithmetic="no training steps here",
                         details=(), meaning=text, formula=(("w ← w − lr·∂loss/∂w", False),))
        return Frame(ex, [], [], (), "")
    shown = run.ready(step)  # a step not computed yet: the last one that is, while the app's worker computes
    focus, extra = train_panes(run, shown, head, modes.decimals)
    rule = ("each new weight written down rounded (m and v stay as the calculator holds them)"
            if run.backward.adamw else "each new weight w − lr·g written down rounded")
    notes = (f"by hand (h): a run of its own, worked as with a calculator at {modes.decimals} decimals: each step's"
             f" forward pass and gradients rounded as the trace's, {rule}",) if modes.hand else ()
    ex = train_explanation(run, shown, head, modes.decimals)
    if shown < step:
        ex = replace(ex, details=(computing_line(run, step), *ex.details))
    return Frame(ex, focus, extra, notes, "")


def _act(sources: Sources, modes: Modes, key: str, across: int) -> Modes | None:
    """h works here as in the trace (the run by hand, teach/train_walk.py); the other trace keys do nothing."""
    return replace(modes, hand=not modes.hand) if key == "hand" else None


VIEW = side_views.BY_NAME["train"]  # declared there (its key, words and help); its behaviour is here
