"""The JSON export (docs/reference.md, "The command line"): every matrix of the computation at full float64 precision.

Written as a stream: one head is computed, written and dropped before the next, and each
matrix goes out a row at a time, one row per line, so memory stays near one head's matrices
however long the document (a 2,048-token, 4-head export is about 1.4 GB of text). Numbers
are Python's shortest round-tripping ``repr``; masked entries of ``masked`` are ``null``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable
from typing import Any, TextIO

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation, HeadResult, NormResult, combine, iter_heads, norm_of
from qkv_tui.core.mla_part import mla_results
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.core.variants import TABLES, Vector
from qkv_tui.core.variants.common import face
from qkv_tui.edges.export_grad import Nested, backward_parts
from qkv_tui.kernels.alibi import Biased
from qkv_tui.kernels.gate import Gated
from qkv_tui.kernels.qk_norm import QKNormed
from qkv_tui.kernels.rope import Rotated
from qkv_tui.kernels.sinks import Sunk
from qkv_tui.kernels.softcap import Capped

_CHUNK = 1 << 16  # characters gathered before each write: few calls, little memory
_NEG_INF = float("-inf")
_BOOL_TEXT = {False: "false", True: "true"}


class _Out:
    """A buffered writer: the text of many rows, handed to ``out`` in large pieces."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.parts: list[str] = []
        self.size = 0

    def write(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)
        if self.size >= _CHUNK:
            self.flush()

    def flush(self) -> None:
        self.out.write("".join(self.parts))
        self.parts.clear()
        self.size = 0


def _matrix(out: _Out, array: Matrix | np.ndarray[Any, Any], indent: str, *, masked: bool = False) -> None:
    """``[`` / one row per line / ``]``; -inf (masked) becomes null where ``masked``."""
    if array.shape[0] == 0:
        out.write("[]")
        return
    out.write("[\n")
    last = array.shape[0] - 1
    number = _BOOL_TEXT.__getitem__ if array.dtype == np.bool_ else float.__repr__
    floats = array.dtype != np.bool_
    for i, row in enumerate(array):
        values = row.tolist()
        if floats and not np.isfinite(row).all():
            # the engine refuses inf and nan (core/engine.py's one overflow rule), so only a masked cell's
            # −∞ gets here, and it is written null; anything else would be bare inf, which is not JSON
            if not masked or any(v != _NEG_INF and not np.isfinite(v) for v in values):
                raise ValueError(f"row {i + 1} of a matrix holds inf or nan, which JSON cannot write")
            text = ", ".join("null" if v == _NEG_INF else float.__repr__(v) for v in values)
        else:
            # repr is the shortest text that reads back as the same float64
            text = ", ".join(map(number, values))
        out.write(f"{indent}  [{text}]{',' if i < last else ''}\n")
    out.write(f"{indent}]")


def _fields(out: _Out, fields: Iterable[tuple[str, Any]], indent: str) -> None:
    """The members of one JSON object, in order; matrices (NumPy arrays) a row per line."""
    out.write("{\n")
    first = True
    for key, value in fields:
        if not first:
            out.write(",\n")
        first = False
        out.write(f"{indent}  {json.dumps(key)}: ")
        if isinstance(value, np.ndarray) and value.ndim == 3:  # a state per token: one d_k × d_v matrix a line
            out.write("[\n" + ",\n".join(f"{indent}    {json.dumps(m.tolist())}" for m in value) + f"\n{indent}  ]")
        elif isinstance(value, np.ndarray):
            _matrix(out, value, indent + "  ", masked=(key == "masked"))
        elif isinstance(value, (_Heads, Nested)):
            value.write(out, indent + "  ")
        else:
            out.write(json.dumps(value, ensure_ascii=False, allow_nan=False))
    out.write(f"\n{indent}}}")


def head_fields(h: HeadResult) -> list[tuple[str, Any]]:
    """One entry of ``heads``, in the export's documented order (docs/scenarios.md, "Modern attention")."""
    own = not any(getattr(r, "kv_given", False) for r in h.parts.values())  # [shared_kv]: another layer's K and V
    return [
        ("name", h.name), ("d_k", h.d_k), ("scale", h.scale),
        ("W_Q", h.W_Q), ("W_K", h.W_K if own else None), ("W_V", h.W_V if own else None),
        ("Q", h.Q), ("K", h.K), ("V", h.V),
        ("scores", h.scores), ("scaled", h.scaled), ("masked", h.masked),
        ("weights", h.weights), ("output", h.output),
        # docs/scenario-format.md, "What is computed" (null where the scenario does not use the feature), then the biases
        ("Q_rot", h.read(Rotated, lambda r: r.Q_rot)), ("K_rot", h.read(Rotated, lambda r: r.K_rot)),
        ("bias", h.read(Biased, lambda b: b.bias)), ("sink", h.read(Sunk, lambda s: s.sink)), ("kv_head", h.kv_head),
        ("b_Q", _vector(h.b_Q)), ("b_K", _vector(h.b_K)), ("b_V", _vector(h.b_V)),
        ("Q_norm", h.read(QKNormed, lambda q: q.Q_norm)), ("K_norm", h.read(QKNormed, lambda q: q.K_norm)),
        ("capped", h.read(Capped, lambda c: c.capped)),
        ("gate", h.read(Gated, lambda g: g.gate)), ("gated_output", h.read(Gated, lambda g: g.gated)),
    ]


def _rope(sc: Scenario) -> dict[str, Any] | None:
    """The frequencies RoPE turns by, after scaling, with YaRN's attention factor and how many dims turn;
    null for plain RoPE (every dim turns at base^(−2i/d_k), all in "positions" and the heads' d_k) and without.
    Under [mla] the rope is its own, turning the d_rope rotary dimensions (DeepSeek's YaRN: its m² on the softmax
    scale is in each head's "scale")."""
    rope = sc.rope if sc.mla is None else sc.mla.rope
    if rope is None or not sc.heads or (rope.partial == 1.0 and rope.scaling is None):
        return None
    d_k = sc.heads[0].d_k if sc.mla is None else sc.mla.d_rope  # [rope] needs one d_k for every head
    return {"inv_freq": rope.inv_freq(d_k).tolist(), "attention_factor": rope.attention_factor,
            "rotated_dims": rope.rotated(d_k)}


def _mla(sc: Scenario, norm: NormResult | None) -> dict[str, Any] | None:
    """The latent attention's parts (docs/scenario-format.md, [mla]): q_R and k_R after the rotation, c_KV after
    its norm; null without [mla]."""
    if sc.mla is None:
        return None
    from qkv_tui.kernels.mla import MlaHead

    heads = mla_results(sc, sc.X if norm is None else norm.X_norm)
    shared = heads[0].need(MlaHead).shared
    return {
        "c_KV_raw": shared.c_KV_raw.tolist(), "c_KV": shared.c_KV.tolist(),
        "c_Q": None if shared.c_Q is None else shared.c_Q.tolist(),
        "heads": [{"q_C": m.q_C.tolist(), "q_R": m.q_R.tolist(), "k_C": m.k_C.tolist(), "v_C": m.v_C.tolist(),
                   "absorbed_scores": m.absorbed_scores.tolist()} for m in (h.part(MlaHead) for h in heads) if m is not None],
        "k_R": shared.k_R.tolist(),
    }


def _vector(values: Vector | None) -> list[float] | None:
    return None if values is None else values.tolist()


class _Heads:
    """The ``heads`` array, computed lazily: each head exists only while it is written."""

    def __init__(self, heads: Iterable[HeadResult]) -> None:
        self.heads = heads

    def write(self, out: _Out, indent: str) -> None:
        out.write("[\n")
        for i, head in enumerate(self.heads):
            if i:
                out.write(",\n")
            out.write(indent + "  ")
            _fields(out, head_fields(head), indent + "  ")
        out.write(f"\n{indent}]")


def linear_fields(h: HeadResult) -> list[tuple[str, Any]]:
    """One entry of ``"linear": {"heads": [...]}`` (docs/scenario-format.md, "[linear]"): S[t] is the state after token t."""
    from qkv_tui.kernels.linear import LinearForward

    lin = h.need(LinearForward)
    return [("phi_Q", lin.phi_Q), ("phi_K", lin.phi_K), ("S", lin.S), ("z", lin.z), ("output", lin.recurrent)]


def deltanet_fields(h: HeadResult) -> list[tuple[str, Any]]:
    """One entry of ``"deltanet": {"heads": [...]}``: q and k as the rule reads them (L2-normalised, q ÷ √d_k)."""
    from qkv_tui.kernels.deltanet import DeltaForward
    from qkv_tui.kernels.deltanet_parts import Around

    dn = h.need(DeltaForward)
    around = h.part(Around)
    conv = None if around is None else around.conv
    normed = None if around is None else around.out_norm
    return [("q", dn.q), ("k", dn.k), ("g", dn.g.tolist()), ("beta", dn.beta.tolist()), ("S", dn.S),
            ("output", dn.output),
            ("gate_o", None if normed is None else normed.gate),  # the output norm's gate: "silu" or "sigmoid" (Kimi)
            # the short convolution's outputs (after SiLU) and the gated output norm's gate input and result
            ("conv_q", None if conv is None else conv[0].out), ("conv_k", None if conv is None else conv[1].out),
            ("conv_v", None if conv is None else conv[2].out), ("z", None if normed is None else normed.z),
            ("normed", None if normed is None else normed.out)]


class _PerHead(_Heads):
    """A variant's ``{"heads": [...]}`` after the document's own fields: each head computed again as it is
    written, so memory stays one head's (a state is n × d_k × d_v)."""

    def __init__(self, sc: Scenario, norm: NormResult | None, fields: Callable[[HeadResult], list[tuple[str, Any]]]) -> None:
        super().__init__(iter_heads(sc, norm))
        self.fields = fields

    def write(self, out: _Out, indent: str) -> None:
        out.write("{\n" + f"{indent}  \"heads\": [\n")
        for i, head in enumerate(self.heads):
            if i:
                out.write(",\n")
            out.write(indent + "    ")
            _fields(out, self.fields(head), indent + "    ")
        out.write(f"\n{indent}  ]\n{indent}}}")


def _part_fields(sc: Scenario, norm: NormResult | None) -> list[tuple[str, Any]]:
    """The fields of the parts registered with a JSON face ([differential]'s), each written by its own module; null
    under the table's name where the scenario has no such table, as every variant's field is (docs/reference.md)."""
    fields: list[tuple[str, Any]] = []
    for t in TABLES:
        if t.faces is not None and t.faces.json is not None:
            fields += face(t.faces.json)(sc, norm, _fields) if t.of(sc) is not None else [(t.key, None)]
    return fields


def _document(
    out: TextIO, sc: Scenario, heads: Iterable[HeadResult], concat: Matrix, output: Matrix, norm: NormResult | None,
    comp: Computation | None = None,
) -> None:
    buffered = _Out(out)
    _fields(buffered, [
        ("title", sc.title),
        ("tokens", list(sc.tokens)),
        ("key_tokens", list(sc.key_tokens)),
        ("X", sc.X),
        ("context_X", sc.context_X),
        ("mask", sc.allow),
        ("heads", _Heads(heads)),
        ("concat", concat),
        ("W_O", sc.W_O),
        ("output", output),
        ("X_norm", norm.X_norm if norm is not None else None),
        ("positions", list(sc.positions) if sc.positions is not None else None),
        ("b_O", _vector(sc.b_O)),
        ("rope", _rope(sc)),
        *backward_parts(sc, comp, _fields),  # "grad", "train": null without [backward]
        ("mla", _mla(sc, norm)),
        ("linear", _PerHead(sc, norm, linear_fields) if sc.linear is not None else None),
        ("deltanet", _PerHead(sc, norm, deltanet_fields) if sc.deltanet is not None else None),
        *_part_fields(sc, norm),  # each registered part's own field, only where the scenario has its table
        *_kv_source(sc),
    ], "")
    buffered.write("\n")
    buffered.flush()


def _kv_source(sc: Scenario) -> list[tuple[str, object]]:
    """"kv_source_layer": the layer whose K and V the chosen layer reuses (a model whose schedule shares K and V
    across layers, Gemma 3n's, or a [shared_kv] table), null where it computes its own."""
    given = sc.input.kv_source_layer
    return [("kv_source_layer", given if given is not None else ask.scenario_answer(sc, "kv_source_layer"))]


def write_json(scenario: Scenario, out: TextIO) -> None:
    """Stream the export to ``out``. Every head is computed once first, to refuse an overflow
    (ScenarioError) before anything is written, keeping only the small head outputs; then
    again, one at a time, as it is written."""
    norm = norm_of(scenario)
    outputs = [head.joined for head in iter_heads(scenario, norm)]
    concat, output = combine(scenario, outputs)
    del outputs
    _document(out, scenario, iter_heads(scenario, norm), concat, output, norm)


def to_json(comp: Computation) -> str:
    """The export of a computation already in memory, as one string."""
    text = io.StringIO()
    _document(text, comp.scenario, comp.heads, comp.concat, comp.output, comp.norm, comp)
    return text.getvalue()
