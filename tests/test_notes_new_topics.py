"""The notes screen (n) has an entry for every topic the app teaches since the first notes were written, and
each holds the sentences the fourth review asked for, with the numbers they quote worked out here."""

from __future__ import annotations

import math

from textual.containers import VerticalScroll

from qkv_tui.kernels.rope_scaling import yarn_default_factor
from qkv_tui.teach.trace_variants import VARIANT_NOTES
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.screens import NotesScreen

NOTES = dict(VARIANT_NOTES)

TOPICS = {
    "Soft-cap (softcap)": ["c·tanh(s/c)", "|s| ≪ c", "dscaled = dS·(1 − tanh²(s/c))"],
    "Another scale (scale, scale_from)": ["√query_pre_attn_scalar = √144 = 12", "attention_multiplier", "scale_from"],
    "Partial rotary ([rope] partial)": ["r = int(partial·dₖ)", "θᵢ = base^(−2i/r)", "ignores position"],
    "RoPE scaling and YaRN ([rope.scaling])": ["L·θ/2π", "beta_fast (32)", "beta_slow (1)", "clamps the ramp's start",
                                               "a = 0.1·ln(factor) + 1", "only the turned dimensions' part"],
    "The output gate (W_G, [gate])": ["non-linearity between W_V and W_O", "mitigates attention sinks"],
    "Layer schedules ([input] schedule)": ["Gemma 2 alternates", "five local layers to each global one",
                                           "three linear-attention layers"],
    "Latent attention ([mla])": ["per token and layer", "576 numbers", "2·n_h·d_h = 32,768", "DeepSeek-V2's Table 1",
                                 "multiplies the softmax scale by m²", "divides by √d_qk / m²"],
    "Linear attention ([linear])": ["e^(q·k/√dₖ)", "associativity", "whatever φ is", "n·(dₖ + d_v)"],
    "The gated delta rule ([deltanet])": ["exact overwrite", "Sᵀk = (1 − β)·old + β·v", "depends on the tokens"],
    "The backward pass and the Train view ([backward])": ["dS = P ⊙ (dP − D)", "w ← w − lr·∂loss/∂w", "(l)"],
}


def test_every_new_topic_has_its_entry_and_sentences() -> None:
    for title, phrases in TOPICS.items():
        assert title in NOTES, title
        for phrase in phrases:
            assert phrase in NOTES[title], (title, phrase)


def test_the_numbers_the_notes_quote() -> None:
    assert 512 + 64 == 576 and 2 * 128 * 128 == 32_768  # DeepSeek-V3: d_c, d_rope; n_h, d_h
    assert math.sqrt(144) == 12  # Gemma 2 27B's query_pre_attn_scalar
    assert yarn_default_factor(4.0) == 0.1 * math.log(4.0) + 1  # the default a the RoPE note states
    yarn = NOTES["RoPE scaling and YaRN ([rope.scaling])"]
    assert "more than beta_fast (32) and it is kept, fewer than beta_slow (1) and it is divided" in yarn


async def test_the_notes_screen_shows_and_scrolls_to_the_last_entry() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("n")
        assert isinstance(app.screen, NotesScreen)
        page = app.screen.query_one(VerticalScroll)
        await pilot.press("end")
        await pilot.pause()
        assert page.scroll_y == page.max_scroll_y > 0
        shown = app.export_screenshot().replace("&#160;", " ")
        assert "the attention map move step by step." in shown  # the last entry's last line, on screen
        await pilot.press("escape")
        assert not isinstance(app.screen, NotesScreen)
