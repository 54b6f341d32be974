"""The backward stages of [mla] in the app (mla_learns): the shared rotary key's gradient as a sum over the
heads, and dCompress gathering every head's paths into the latent; their snapshots at 80×24 and 120×40."""

from __future__ import annotations

import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.teach.place import find_place
from qkv_tui.teach.trace import Trace
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.matrix import MatrixView
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine

SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
# where each test opens (as --stage dk_r --op 1 does), and the keys pressed there
AT = {"dk_r": 1, "dcompress": 2}


def opened(stage: str) -> QKVApp:
    sc = load_scenario("mla_learns")
    return QKVApp(sc, place=find_place(Trace(compute(sc)), stage, AT[stage]))


def shown(app: QKVApp) -> dict[str, MatrixView]:
    return {v.spec.key: v for v in app.query(MatrixView) if v.display and v.spec is not None}


async def test_the_shared_key_sums_the_heads_shares() -> None:
    app = opened("dk_r")
    async with app.run_test(size=(120, 40)):
        assert "17/20 dk_R" in str(app.query_one(FormulaLine).render())
        text = app.query_one(ExplainPanel).plain
        assert "dk_R'[I,0] = dK[I,2] of head 1 + dK[I,2] of head 2 = 0.098 + 0.098 = 0.196" in text
        assert "SUM over the heads" in text
        assert {"dK_s@0", "dK_s@1", "dk_R_sum@None"} <= set(shown(app))


async def test_dcompress_reads_every_heads_paths() -> None:
    app = opened("dcompress")
    async with app.run_test(size=(120, 40)):
        assert "19/20 dCompress" in str(app.query_one(FormulaLine).render())
        text = app.query_one(ExplainPanel).plain
        assert "dc_KV[I,1] = dk_C[I]·W_UK[1,:] + dv_C[I]·W_UV[1,:] (all 2 heads' columns)" in text
        assert shown(app)["dc_KV_d@None"].spec.current == (0, 1)


class TestMlaBackwardSnapshots:
    @SIZES
    @pytest.mark.parametrize("stage", sorted(AT))
    def test_stage(self, snap_compare, stage: str, size: tuple[int, int]) -> None:
        assert snap_compare(opened(stage), terminal_size=size)
