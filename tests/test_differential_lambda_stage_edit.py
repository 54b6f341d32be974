"""The λ stage of differential attention names where it is: its one row per head is labelled as the head's (not
by the first token), and `e` on any of its cells opens the editor at the head's row of the λ vector that cell
reads (the λ vectors are no pane, so the operands cannot say), not at X."""

from __future__ import annotations

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import builtin_dir, load_scenario
from qkv_tui.teach.trace import Trace
from qkv_tui.ui.app import QKVApp


def test_the_lambda_rows_and_their_gradients_are_labelled_by_no_token() -> None:
    for name, tables in (("differential", ("lambda",)),
                         ("differential_learns", ("lambda", "dlam", "ddots", "dlambda_q1", "dlambda_k2"))):
        comp = compute(load_scenario(builtin_dir() / f"{name}.toml"))
        trace = Trace(comp)
        for table in tables:
            label = trace.row_label(table, 0)
            assert label == "head", (name, table, label)
            assert label not in comp.scenario.labels


async def test_e_on_the_lambda_stage_opens_at_the_heads_lambda_vector() -> None:
    app = QKVApp("differential")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        seen = []
        for head_keys in ((), ("tab",)):
            await pilot.press(*head_keys, "9")  # stage 9 is λ: five cells
            for col in range(5):
                op = app.trace.op(app.position.index)
                assert op.segment.stage == "diff_lambda" and op.col == col
                cell = app.live.default_cell()
                seen.append((cell.matrix, cell.head, cell.row, cell.col))
                await pilot.press("right")
        expected = [(("lambda_q1" if c in (0, 1, 4) else "lambda_q2"), None, h, 0) for h in (0, 1) for c in range(5)]
        assert seen == expected
