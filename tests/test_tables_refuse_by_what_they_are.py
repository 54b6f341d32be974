"""A table refuses another by what that table is, not by its name (core/variants/refusals.py): a new table whose
value keeps a state, builds the heads or acts on the logits is refused exactly as [linear], [mla] or [alibi] are,
with its own header in the line; a head key marked a part of the softmax is refused by a table that replaces it.
And the walks the first variants moved out of (the head builders, the forward driver, the editor, the refusing
tables) name none of them, as benchmarks/variant_reach.py reads them."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pytest

from qkv_tui.core.scenario import ScenarioError, _Validator, load_scenario
from qkv_tui.core.variants import differential, indexer, linear, ssd, v_norm, value_scale
from qkv_tui.core.variants.alibi import TABLE as ALIBI
from qkv_tui.core.variants.common import Context

from .conftest import ROOT
from .test_views_ask_the_parts import _reach


@dataclass(frozen=True)
class Stateful:
    state: ClassVar[bool] = True


@dataclass(frozen=True)
class Latent:
    builds_heads: ClassVar[bool] = True


@dataclass(frozen=True)
class Tilt:
    acts_on: ClassVar[str] = "logits"
    does: ClassVar[str] = "tilts"


@dataclass(frozen=True)
class Scaler:
    acts_on: ClassVar[str] = "queries and keys"
    does: ClassVar[str] = "scales"
    whole_head: ClassVar[bool] = True


@dataclass(frozen=True, eq=False)
class OddHead:
    """A head whose one key is marked a part of the softmax, as the loader's Head marks its sink."""

    W_V: Any = None
    kv_head: int | None = None
    bonus: float | None = field(default=1.0, metadata={"softmax": "a bonus logit", "joins_sum": "a bonus"})


def _ctx(earlier: dict[str, object], heads: tuple[object, ...] = ()) -> Context:
    n = 3
    return Context(_Validator("f.toml"), ("a", "b", "c"), 2, False, tuple((f"head {i + 1}", 2) for i in range(len(heads))),
                   "causal", np.tril(np.ones((n, n), dtype=bool)), earlier=dict(earlier), head_tables=heads)


def _said(parse: Any, ctx: Context) -> str:
    with pytest.raises(ScenarioError) as caught:
        parse(ctx)
    return caught.value.message


PARSERS = {
    "differential": differential._refuse_with,
    "indexer": lambda ctx: indexer.parse_indexer({}, ctx),
    "ssd": lambda ctx: ssd.parse_ssd({}, ctx),
    "v_norm": lambda ctx: v_norm.parse_v_norm({}, ctx),
    "value_scale": lambda ctx: value_scale.parse_value_scale({}, ctx),
    "linear": lambda ctx: linear.parse_linear({}, ctx),
}


@pytest.mark.parametrize(("refuser", "value", "line"), [
    ("differential", Stateful(), "[differential] cannot be used with [newtable]: [newtable] replaces the softmax,"
                                 " and [differential] subtracts two softmax maps"),
    ("indexer", Stateful(), "[indexer] cannot be used with [newtable]: [newtable] keeps a running state"),
    ("ssd", Stateful(), "[ssd] cannot be used with [newtable]: [newtable] and [ssd] each replace the softmax"),
    ("v_norm", Stateful(), "[v_norm] cannot be used with [newtable]: [newtable]'s stages read V as projected"),
    ("differential", Latent(), "[differential] cannot be used with [newtable]: [newtable] builds its own heads"),
    ("value_scale", Latent(), "[value_scale] cannot be used with [newtable]: [newtable] builds V from its latent"),
    ("ssd", Tilt(), "[ssd] cannot be used with [newtable]: [ssd] has no softmax, whose logits [newtable] tilts"),
    ("linear", Tilt(), "[linear] replaces the softmax, whose logits [newtable] tilts; expected [newtable] or [linear]"),
    ("differential", Scaler(), "[differential] cannot be used with [newtable]: [newtable] scales a head's whole d_k"),
    ("ssd", Scaler(), "[ssd] cannot be used with [newtable]: [ssd] has no Q or K, which [newtable] scales"),
])
def test_a_new_table_is_refused_by_what_it_is(refuser: str, value: object, line: str) -> None:
    assert _said(PARSERS[refuser], _ctx({"newtable": value})).startswith(line)


def test_a_new_head_key_of_the_softmax_is_refused_by_what_it_is() -> None:
    heads = (OddHead(), OddHead(bonus=None))
    assert _said(PARSERS["linear"], _ctx({}, heads)) == (
        "[linear] replaces the softmax, which a bonus logit belongs to, but head 1 has bonus; expected no bonus with [linear]")
    assert _said(PARSERS["differential"], _ctx({}, heads)) == (
        "head 1 has a bonus, but [differential] has two softmax maps and a bonus joins one softmax;"
        " expected no bonus with [differential]")


def test_alibi_is_a_part_of_the_scenario_not_a_field() -> None:
    sc = load_scenario("alibi")
    assert "alibi" in sc.parts and not hasattr(sc, "alibi")
    slopes = ALIBI.of(sc).slopes  # type: ignore[union-attr]
    p = np.arange(sc.n, dtype=float)
    from qkv_tui.core.engine import compute
    from qkv_tui.kernels.alibi import Biased

    for h, hr in enumerate(compute(sc).heads):  # the bias kept on each head is slope·(j − i), worked here again
        assert np.array_equal(hr.need(Biased).bias, slopes[h] * (p[None, :] - p[:, None]))


WALKS = {  # a walk the first variants moved out of, and the variants it may still name (and why)
    "core/head_parts.py": set(),
    "core/forward.py": set(),
    "core/cell_edit.py": {"qk_norm", "mla"},  # [qk_norm]'s gains and [mla]'s latent weights are edited by name still
    "core/variants/differential.py": set(),
    "core/variants/ssd.py": {"gate"},  # its own gate stream z, named as transformers' Mamba-2 names it
    "core/variants/v_norm.py": set(),
    "core/variants/value_scale.py": set(),
    "core/variants/linear.py": set(),
    "core/variants/deltanet.py": set(),
    "core/variants/deltanet_io.py": set(),
}


@pytest.mark.parametrize("module", sorted(WALKS))
def test_the_walks_name_no_first_variant(module: str) -> None:
    reach = _reach()
    used = reach.names_in(ast.parse((ROOT / "qkv_tui" / module).read_text(encoding="utf-8")))
    stem = module.rsplit("/", 1)[-1]
    named = {variant for variant, pattern in reach.VARIANTS.items()  # a variant's own module names it freely
             if not any(word in stem for word in reach.OWN[variant]) and any(re.search(pattern, n) for n in used)}
    assert named <= WALKS[module], named - WALKS[module]
