"""The other faces of [value_scale] read the scaled V through the result, with nothing of their own: the JSON
export's V and output, the decode (KV cache) and tiles views and their lines; what it refuses is one line."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.decode_view import decode_explanation
from qkv_tui.display.tiled_view import tiled_explanation
from qkv_tui.edges.export_json import write_json
from qkv_tui.teach.decode import SCHEDULES, decode
from qkv_tui.teach.tiled import tiled

from .arith_check import checked
from .error_table import assert_one_error_line
from .test_value_scale import FACTOR, numpy_layer, scaled


def test_json_holds_the_scaled_values_and_output() -> None:
    sc = parse_scenario(scaled(), "scaled.toml")
    out = io.StringIO()
    write_json(sc, out)
    data = json.loads(out.getvalue())
    Vs, outs, final = numpy_layer(FACTOR)
    for head, V, o in zip(data["heads"], Vs, outs, strict=True):
        np.testing.assert_allclose(np.array(head["V"]), V, rtol=1e-13)
        np.testing.assert_allclose(np.array(head["output"]), o, rtol=1e-13)
    np.testing.assert_allclose(np.array(data["output"]), final, rtol=1e-13)


def test_decode_and_tiles_agree_and_their_lines_check_out() -> None:
    comp = compute(parse_scenario(scaled(), "scaled.toml"))
    lines = []
    for h, hr in enumerate(comp.heads):
        assert np.allclose(tiled(comp, h, 2).output, hr.output, rtol=1e-12, atol=1e-12)
        for mode in SCHEDULES:
            dec = decode(comp, mode)
            assert np.allclose(np.concatenate([s.output for s in dec.steps[h]]), hr.output, rtol=1e-12, atol=1e-12)
            lines += [line for i in range(dec.count) for line in (decode_explanation(dec, i, h, 3).arithmetic,)]
        th = tiled(comp, h)
        lines += [tiled_explanation(th, i, 3).arithmetic for i in range(len(th))]
    count, bad = checked(lines)
    assert not bad, "\n".join(bad[:5])
    assert count > 10


BACKWARD = '\n[backward]\nloss = "squared"\ntarget = [[0, 0, 0], [0, 0, 0], [0, 0, 0]]\n'


@pytest.mark.parametrize(("extra", "expected"), [
    (BACKWARD, "[value_scale] cannot be used with [backward]"),
])
def test_what_it_cannot_combine_with_is_one_line(cli, write, extra: str, expected: str) -> None:
    assert_one_error_line(cli, write, scaled().replace("\n[value_scale]", extra + "\n[value_scale]"), expected)


def test_mla_is_refused_in_one_line(cli, write) -> None:
    from qkv_tui.core.scenario import builtin_dir

    text = (builtin_dir() / "mla.toml").read_text(encoding="utf-8") + "\n[value_scale]\nfactor = 0.5\n"
    assert_one_error_line(cli, write, text, "[value_scale] cannot be used with [mla]")
