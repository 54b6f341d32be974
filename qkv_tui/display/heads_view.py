"""The heads view (v): every head's attention map side by side, one picked; enter steps through it.

Its step is the picked head (← → one head, ↑ ↓ a row of maps). For a scenario whose file holds a
[model] table the maps are every head of the layer, whichever heads the file chose, and [ ] walk the
layers (core/model_layers.py computes each layer's input once); enter then opens that layer's scenario
of every head at the picked head's first stage.
"""

from __future__ import annotations

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation
from qkv_tui.core.layer_schedule import attends
from qkv_tui.core.model_layers import ModelLayers, model_layers
from qkv_tui.core.part_masks import masked_legend
from qkv_tui.display import side_views
from qkv_tui.display.frame import Frame
from qkv_tui.display.heads_grid import HeadMap, HeadsGrid, HeadsShown, readings
from qkv_tui.display.modes import Modes
from qkv_tui.display.side_view import Sources
from qkv_tui.display.view import Explanation
from qkv_tui.teach.summary import MAX_ROWS, looked_at, looks_heading, weights_note

KEYS = "← → ↑ ↓ pick a head · enter: step through it · v: back to the trace"
OWN = "Each head has its own W_Q (its keys may be shared, as in GQA and MQA), so a pattern of its own"
MEANING = ("{own}: rows are"
           " the queries, columns the keys,"
           " a fuller block is more weight, · {masked}. A reading describes the weights on this text, not what the head"
           " is for.")  # not "darker": on the dark theme more weight is brighter


def _model(sources: Sources) -> ModelLayers | None:
    return sources.kept(("heads", "model"), lambda: model_layers(sources.comp.scenario))


def layer_of(sources: Sources, modes: Modes) -> int | None:
    """The layer the maps show (a model scenario), or None for any other scenario."""
    walk = _model(sources)
    if walk is None:
        return None
    # by default the layer of the computation in view: the file's, or the one enter opened
    return sources.comp.scenario.input.chosen_layer if modes.heads_layer is None else modes.heads_layer


def shown(sources: Sources, modes: Modes) -> Computation:
    """The computation whose heads the maps show: the app's own, or every head of the model's layer."""
    walk, layer = _model(sources), layer_of(sources, modes)
    if walk is None or layer is None:
        return sources.comp
    return walk.computation(layer)


def grid(sources: Sources, modes: Modes) -> HeadsGrid:
    layer = layer_of(sources, modes)

    def build() -> HeadsGrid:
        comp = shown(sources, modes)
        sc = comp.scenario
        maps = []
        for h, hr in enumerate(comp.heads):
            name = hr.name if layer is None else f"L{layer} H{h}"  # 0-based, as the importer's [[heads]] names
            # the keys the maps attend: a part's own mask (the indexer's selection) marks its keys masked too
            maps.append(HeadMap(name, hr.weights, *readings(hr.weights, comp.allow, sc.labels, sc.key_labels)))
        return HeadsGrid(tuple(maps), comp.allow, sc.labels, sc.key_labels, masked_legend(comp.heads))

    return sources.kept(("heads", "grid", layer), build)


def _opening(sources: Sources, modes: Modes, head: int) -> int:
    """The map the view opens on: the trace's head; a model's layer shows every head of it, and opens on its first."""
    return 0 if layer_of(sources, modes) is not None else min(head, _steps(sources, modes, head) - 1)


def _steps(sources: Sources, modes: Modes, head: int) -> int:
    return len(shown(sources, modes).heads)


def _frame(sources: Sources, modes: Modes, step: int, head: int) -> Frame:
    comp = shown(sources, modes)
    sc = comp.scenario
    heads = grid(sources, modes)
    name = heads.maps[step].name
    hr = comp.heads[step]
    looks = [looked_at(hr, comp.allow[i], sc.labels[i], sc.key_labels, i, modes.decimals)
             for i in range(min(sc.n, MAX_ROWS))]
    more = f"; … {sc.n - MAX_ROWS} more tokens" if sc.n > MAX_ROWS else ""
    layer = layer_of(sources, modes)
    walk = _model(sources)
    keys = KEYS
    stages: tuple[tuple[str, str], ...] = ()
    count = f"{len(heads.maps)} head" + ("s" if len(heads.maps) != 1 else "")  # not "1 heads"
    counter = count
    if walk is not None and layer is not None:
        keys = KEYS.replace(" · v:", " · [ ] another layer · v:")
        stages = tuple((f"L{i}", "current" if i == layer else "todo") for i in range(walk.layers))
        counter = f"layer {layer} (0 … {walk.layers - 1}) · {count}"
    explanation = Explanation(
        stage_label="heads", counter=counter, head_label=f"{name} ({step + 1}/{len(heads.maps)})",
        arithmetic=f"{looks_heading(sc)}, {name}{weights_note(sc)}: " + "; ".join(looks) + more,
        details=(keys,),
        meaning=MEANING.format(own=next(iter(ask.said(hr, "heads.own")), OWN), masked=masked_legend(comp.heads)),
        formula=_formula(comp), stages=stages,
    )
    return Frame(explanation, [], [], (), "", heads=HeadsShown(heads, step))


def _formula(comp: Computation) -> tuple[tuple[str, bool], ...]:
    """What the maps hold, as a part's record says where it is not the softmax's (a state head's weights, a
    differential head's two maps)."""
    said = ask.map_formula(comp.heads)
    if said is not None:
        return said
    from qkv_tui.teach.stages.scale import divisor_text

    return ((f"softmax(Q·Kᵀ/{divisor_text(comp.heads)})", True), ("·V", False))


def _act(sources: Sources, modes: Modes, action: str, across: int) -> Modes | None:
    from dataclasses import replace

    count = _steps(sources, modes, 0)
    if action in ("row+1", "row-1"):
        step = modes.side_step + (across if action == "row+1" else -across)
        return replace(modes, side_step=step) if 0 <= step < count else None
    walk, layer = _model(sources), layer_of(sources, modes)
    if walk is None or layer is None or action not in ("next_stage", "prev_stage"):
        return None
    step = 1 if action == "next_stage" else -1
    layer += step
    schedule = sources.comp.scenario.input.schedule
    while 0 <= layer < len(schedule) and not attends(schedule[layer]):  # a hybrid's MLP block: nothing to show
        layer += step
    if not 0 <= layer < walk.layers:
        return None
    return replace(modes, heads_layer=layer, side_step=min(modes.side_step, len(walk.computation(layer).heads) - 1))


def _enter(sources: Sources, modes: Modes) -> tuple[Computation | None, int]:
    comp = shown(sources, modes)
    same = comp is sources.comp or (layer_of(sources, modes) == sources.comp.scenario.input.chosen_layer
                                    and len(comp.heads) == len(sources.comp.heads))  # the file shows them all
    return (None if same else comp), modes.side_step


def _shot(modes: Modes) -> str:
    layer = "" if modes.heads_layer is None else f"-layer{modes.heads_layer}"
    return f"heads{layer}-head{modes.side_step + 1}"


VIEW = side_views.BY_NAME["heads"]  # declared there (its key, words and help); its behaviour is here
