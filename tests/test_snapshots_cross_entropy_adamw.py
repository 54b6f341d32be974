"""Snapshots of next_token_adamw: the Loss stage's softmax over the vocabulary (80×24) and the Train view's worked
AdamW step (120×40). Each SVG was rendered to PNG and looked at before it was accepted."""

from __future__ import annotations

from qkv_tui.ui.app import QKVApp


def test_loss_stage_softmax_over_the_vocabulary(snap_compare) -> None:
    # p[I,1]: the row's logits, its max, each e^(z − max) and their sum, at 80×24
    assert snap_compare(QKVApp("next_token_adamw"), press=["7", *["right"] * 13], terminal_size=(80, 24))


def test_train_view_adamw_step(snap_compare) -> None:
    # step 2: m and v carried over from step 1, the bias corrections at t = 2, the update, the weights beside P
    assert snap_compare(QKVApp("next_token_adamw"), press=["l", "right", "right"], terminal_size=(120, 40))
