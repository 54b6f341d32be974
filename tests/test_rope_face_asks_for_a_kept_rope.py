"""RoPE's export face (edges/faces/rope.py) finds a [rope] another table keeps for columns of its own ([mla]'s
rotary ones) by asking the scenario's tables (``own_rope``), not by naming [mla] (issue 30, as
benchmarks/variant_reach.py reads it). The frequencies it then exports under [mla] are checked against
transformers' DeepSeek-V3 in tests/test_importers_deepseek_yarn.py."""

from __future__ import annotations

import ast
import re

from qkv_tui import load_scenario
from qkv_tui.core.part_questions import scenario_answer

from .conftest import ROOT
from .test_views_ask_the_parts import _reach


def test_the_rope_face_names_no_latent_layer() -> None:
    mla = re.compile(_reach().VARIANTS["mla"])
    used = _reach().names_in(ast.parse((ROOT / "qkv_tui" / "edges" / "faces" / "rope.py").read_text(encoding="utf-8")))
    assert not sorted(n for n in used if mla.search(n))


def test_only_a_table_that_keeps_a_rope_answers() -> None:
    sc = load_scenario("mla")
    assert sc.mla is not None and sc.mla.rope is not None and sc.rope is None  # the loader gives [mla] its [rope]
    assert scenario_answer(sc, "own_rope") == (sc.mla.rope, sc.mla.d_rope)
    plain = load_scenario("rope_scaling")
    assert plain.rope is not None and scenario_answer(plain, "own_rope") is None  # every head's [rope]: the file's
