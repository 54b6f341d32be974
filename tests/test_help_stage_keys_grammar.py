"""The help's row for the stage keys: past stage 10 it says how the keyless stages are reached, "it" for
stage 11 alone and "them" for stages 11 … N (it said "stages 11 … 13 have no key (] / [ reach it)")."""

from __future__ import annotations

from qkv_tui.ui.widgets.screens import stage_keys_row


def test_one_keyless_stage_is_it() -> None:
    assert stage_keys_row(11)[1].endswith("; stage 11 has no key (] / [ reach it)")


def test_several_keyless_stages_are_them() -> None:
    assert stage_keys_row(13)[1].endswith("; stages 11 … 13 have no key (] / [ reach them)")
    assert stage_keys_row(20)[1].endswith("; stages 11 … 20 have no key (] / [ reach them)")
