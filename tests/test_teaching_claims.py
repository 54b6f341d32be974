"""What the teaching text says, pinned against the numbers it describes and the conventions it names.

Each test holds one claim a student reads (a stage meaning, a note, a scenario's description, the
docs) to the computation, or to the library convention written out here independently.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.fmt import fmt
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.kernels.rope import Rotated
from qkv_tui.teach.trace import STAGES, Trace
from qkv_tui.teach.trace_variants import VARIANT_NOTES
from qkv_tui.ui.widgets.screens import NOTES

from .conftest import BASE, HEAD, ROOT, SCENARIOS

DOC = (ROOT / "docs" / "scenario-format.md").read_text(encoding="utf-8")
# the README's text, wherever it now lives: the README and the docs pages its sections moved to
USER_DOCS = {name: (ROOT / name).read_text(encoding="utf-8") for name in (
    "README.md", *(f"docs/{page}.md" for page in ("index", "teachers", "students", "reference", "scenarios", "real-models",
                                                   "classroom", "deploy", "performance", "contributing")))}
BUILTINS_PAGE = USER_DOCS["docs/scenarios.md"]  # the built-in scenarios' table


def teaching_text() -> dict[str, str]:
    """Every sentence of prose the app shows: stage meanings (as each built-in words them), every
    operation's explanation, the notes and the scenarios' descriptions."""
    texts = {f"stage {key}": stage.meaning for key, stage in STAGES.items()}
    texts |= {f"note {title}": body for title, body in NOTES}
    for path in SCENARIOS:
        sc = load_scenario(path)
        trace = Trace(compute(sc))
        texts[f"{path.stem} description"] = sc.description
        for key in trace.stage_keys:
            for h in range(len(sc.heads)):
                texts[f"{path.stem} {key} {h}"] = trace.meaning(key, h)
        for i in range(len(trace)):
            op = trace.op(i)
            texts[f"{path.stem} op {i}"] = " ".join((op.arithmetic, *op.details))
    return texts


TEXTS = teaching_text()


# --- 1. cross-attention: the decoder asks, the encoder answers (Vaswani et al. 2017, §3.2.3) ---------------


def test_cross_attention_queries_are_the_french_decoder_and_keys_the_english_encoder() -> None:
    sc = load_scenario("cross_attention")
    assert sc.tokens == ("J'", "aime", "l'IA") and sc.key_tokens == ("I", "love", "AI")
    assert sc.context_X is not None and sc.context_X.shape == (3, 4) and sc.X.shape == (3, 3)
    seed = load_scenario("i_love_ai")
    assert np.array_equal(sc.context_X, seed.X)  # the English side is the seed's rows
    assert np.array_equal(sc.heads[0].W_V, seed.heads[0].W_V)  # "so the Values are the seed's"
    assert "decoder" in sc.description and "French tokens (X" in sc.description


def test_cross_attention_numbers_worked_by_hand() -> None:
    head = compute(load_scenario("cross_attention")).heads[0]
    # Q = X·W_Q: J' = [1,1,0] takes rows 0 and 1 of W_Q = diag(2, 2, 1): [2, 2, 0]; aime [2, 0, 1]; l'IA [0, 2, 1]
    assert head.Q.tolist() == [[2, 2, 0], [2, 0, 1], [0, 2, 1]]
    # K = X_ctx·W_K: I = [1,0,1,0] takes rows 0 and 2 of W_K: [0,1,0] + [1,0,0] = [1, 1, 0]
    assert head.K.tolist() == [[1, 1, 0], [1, 0, 2], [0, 1, 2]]
    assert head.V.tolist() == [[1, 0, 1], [1, 2, 0], [1, 1, 0]]  # the seed's Values
    assert head.scores.tolist() == [[4, 2, 2], [2, 4, 2], [2, 2, 4]]
    # each French token's own source word: e^(4/√3) / (e^(4/√3) + 2·e^(2/√3)) = 1 / (1 + 2·e^(−2/√3))
    own = 1 / (1 + 2 * math.exp(-2 / math.sqrt(3)))
    assert fmt(own, False, 3) == "0.613"
    assert np.allclose(np.diag(head.weights), own)
    assert [int(np.argmax(row)) for row in head.weights] == [0, 1, 2]  # J' → I, aime → love, l'IA → AI
    assert "0.613" in load_scenario("cross_attention").description


def test_the_notes_and_docs_say_the_decoder_asks() -> None:
    note = dict(NOTES)["Self-attention vs cross-attention"]
    assert "Queries come from the decoder and the Keys and Values from the encoder's output" in note
    assert "§3.2.3" in note
    assert "the French decoder's tokens ask" in BUILTINS_PAGE
    context = DOC[DOC.index("### `[context]`"):DOC.index("### `[mask]`")]
    assert "target-language tokens being written ask" in context


# --- 2. RoPE: position enters only through m − n; the vectors matter too (Su et al., RoFormer §3.2) ---------


def test_no_text_says_a_rope_score_depends_only_on_the_distance() -> None:
    wrong = re.compile(r"depends? only on (the distance|how far)|only sees the difference")
    for where, text in {**TEXTS, "variant notes": str(VARIANT_NOTES), "doc": DOC, **USER_DOCS}.items():
        assert not wrong.search(text), where


def test_two_rope_scores_at_the_same_distance_differ() -> None:
    sc = load_scenario("rope")
    head = compute(sc).heads[0]
    assert sc.positions == (0, 1, 2)
    love_i, ai_love = head.scores[1, 0], head.scores[2, 1]  # both at distance 1
    assert (fmt(float(love_i), False, 3), fmt(float(ai_love), False, 3)) == ("2.081", "1.779")
    assert "love → I 2.081, AI → love 1.779" in sc.description
    trace = Trace(compute(sc))
    op = next(trace.op(i) for i in range(len(trace)) if trace.op(i).arithmetic.startswith("scores[love,I]"))
    assert "position enters this score only through the distance 1 − 0 = 1" in op.details[0]


def test_rope_rotates_rather_than_adds() -> None:
    adds = re.compile(r"\badds? (it|position\w*)?\s*to Q and K|add it later \(to Q and K")
    for where, text in TEXTS.items():
        assert not adds.search(text), where
    assert re.search(r"\brotat", STAGES["embed"].meaning)  # RoPE rotates Q and K


# --- 3. RoPE layouts: Hugging Face's LLaMA checkpoints are Meta's weights, permuted ------------------------


def hf_permute(w_out_in: np.ndarray, n_heads: int) -> np.ndarray:
    """transformers' convert_llama_weights_to_hf.py ``permute`` on a (out, in) projection weight:
    ``w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)``."""
    dim1, dim2 = w_out_in.shape
    return w_out_in.reshape(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(0, 2, 1, 3).reshape(dim1, dim2)


def test_rope_layouts_permuted_head_is_hugging_faces_permutation_of_rope() -> None:
    rope, layouts = load_scenario("rope"), load_scenario("rope_layouts")
    meta = rope.heads[0]
    permuted, unpermuted = layouts.heads
    assert (permuted.name, unpermuted.name) == ("permuted", "unpermuted")
    for role in ("W_Q", "W_K"):  # this app's W is d_model × dₖ, nn.Linear's weight its transpose
        assert np.array_equal(getattr(permuted, role), hf_permute(getattr(meta, role).T, 1).T), role
        assert np.array_equal(getattr(unpermuted, role), getattr(meta, role)), role
    assert np.array_equal(permuted.W_V, meta.W_V[:, :2]) and np.array_equal(unpermuted.W_V, meta.W_V[:, :2])


def test_each_layout_gives_the_same_scores_with_its_own_weights() -> None:
    inter = compute(load_scenario("rope")).heads[0]
    permuted, unpermuted = compute(load_scenario("rope_layouts")).heads
    assert np.allclose(permuted.scores, inter.scores, rtol=0, atol=1e-12)
    assert np.allclose(permuted.weights, inter.weights, rtol=0, atol=1e-12)
    assert permuted.part(Rotated) is not None and inter.part(Rotated) is not None
    # the same numbers, reordered
    assert np.allclose(permuted.need(Rotated).Q_rot[:, [0, 2, 1, 3]], inter.need(Rotated).Q_rot, rtol=0, atol=1e-12)
    assert not np.allclose(unpermuted.scores, inter.scores)  # the same weights in the wrong layout
    assert "love's row 2.081, 3, 3.763" in load_scenario("rope_layouts").description
    assert [fmt(float(v), False, 3) for v in permuted.scores[1]] == ["2.081", "3.000", "3.763"]
    assert [fmt(float(v), False, 3) for v in unpermuted.scores[1]] == ["2.540", "3.000", "3.382"]
    assert "(love's row 2.540, 3, 3.382)" in load_scenario("rope_layouts").description


def test_the_half_layout_is_credited_to_gpt_neox() -> None:
    rotate = STAGES["rotate"].meaning
    assert "GPT-NeoX" in rotate and "RoFormer" in rotate
    assert "GPT-NeoX's rotate_half" in DOC and "convert_llama_weights_to_hf.py" in DOC
    assert "convert_llama_weights_to_hf.py" in dict(VARIANT_NOTES)["RoPE ([rope])"]


# --- 4. whose sliding window, whose masked cells --------------------------------------------------------------


def test_the_window_is_the_one_each_named_library_computes() -> None:
    """Hugging Face (kv > q − W), gpt-oss (tril(−inf, diagonal=−W) removed), FlashAttention's
    window_size = (W − 1, 0) and the Mistral paper's i − W' … i with W' = W − 1: one mask."""
    sc = load_scenario("sliding_window")
    window = sc.window
    assert window == 3
    n = sc.n
    i, j = np.indices((n, n))
    hf = (j > i - window) & (j <= i)
    gpt_oss = ~np.tril(np.ones((n, n), bool), k=-window) & (j <= i)
    left, right = window - 1, 0
    flash = (j >= i - left) & (j <= i + right)
    mistral = (j >= i - (window - 1)) & (j <= i)
    for convention in (hf, gpt_oss, flash, mistral):
        assert np.array_equal(compute(sc).allow, convention)
    assert all(row.sum() <= window for row in compute(sc).allow)  # window keys, the query's own included
    meaning = Trace(compute(sc)).meaning("scale", 0)
    for named in ("3 keys, the query's own included, as Hugging Face transformers and gpt-oss", "window_size = (2, 0)",
                  "the Mistral paper, where position i sees i − W … i, as W = 2"):
        assert named in meaning
    assert "window_size = (2, 0)" in sc.description and "W = 2" in sc.description


def test_what_libraries_put_in_masked_cells() -> None:
    """The note's three fills: the same weights while a row keeps a key; on a fully masked row
    −∞ gives NaN, finfo.min equal weights, −10000 the unmasked softmax."""
    scores = np.array([[0.5, 2.0, -1.0], [1.5, -0.5, 3.0]], dtype=np.float32)
    allow = np.array([[True, True, False], [False, False, False]])

    def softmax(x: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)

    inf = softmax(np.where(allow, scores, -np.inf))
    finfo = softmax(scores + np.where(allow, 0, np.finfo(np.float32).min).astype(np.float32))
    bert = softmax(scores + np.where(allow, 0, -10000).astype(np.float32))
    assert np.array_equal(inf[0], finfo[0]) and np.allclose(inf[0], bert[0], atol=1e-7) and inf[0, 2] == 0
    assert np.isnan(inf[1]).all()
    assert np.allclose(finfo[1], 1 / 3)
    assert np.allclose(bert[1], softmax(scores[1:])[0], atol=1e-3)
    note = dict(VARIANT_NOTES)["What masked cells hold"]
    for named in ("torch.finfo(dtype).min", "−10000", "0/0 = NaN", "same weight", "unmasked softmax"):
        assert named in note


def test_torch_returns_a_zero_row_for_a_fully_masked_query() -> None:
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    q, k, v = torch.ones(1, 1, 2, 2), torch.ones(1, 1, 3, 2), torch.arange(6.0).reshape(1, 1, 3, 2)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(out[0, 0, 1], torch.zeros(2))  # what the note says PyTorch 2.13 does
    assert torch.__version__.startswith("2.13")
    assert "PyTorch 2.13's scaled_dot_product_attention returns a zero row" in dict(VARIANT_NOTES)["What masked cells hold"]


# --- 5. the smaller ones ------------------------------------------------------------------------------------------


def test_gqa_examples_add_up() -> None:
    """Each example's sharing factor is its query heads over its K/V heads."""
    note = dict(VARIANT_NOTES)["Grouped-query and multi-query attention (num_kv_heads)"]
    found = re.findall(r"(\d+) times in [^(]*\((\d+)(?: query heads,)? (?:and )?(\d+)", note)
    assert found == [("8", "64", "8"), ("4", "32", "8")]  # LLaMA 2 70B, Mistral 7B
    assert "LLaMA 2 7B and 13B use plain multi-head attention" in note
    gqa = load_scenario("gqa").description
    pattern = r"(\d+) query heads per K/V head \((\d+) and (\d+)\), Mistral 7B and LLaMA 3 8B (\d+) \((\d+) and (\d+)\)"
    found = re.findall(pattern, gqa)
    assert found == [("8", "64", "8", "4", "32", "8")]
    for ratio, a, b in (found[0][:3], found[0][3:]):
        assert int(ratio) * int(b) == int(a)
    assert "LLaMA 2 7B and 13B keep plain multi-head attention" in gqa


def test_the_kv_sharing_sentence_appears_once_per_kv_head() -> None:
    for name in ("gqa", "mqa"):
        sc = load_scenario(name)
        trace = Trace(compute(sc))
        said = [trace.op(i) for i in range(len(trace)) if any("is computed once and read by" in d for d in trace.op(i).details)]
        assert sc.num_kv_heads is not None and len(said) == sc.num_kv_heads, name
        heads = compute(sc).heads
        assert sorted(heads[op.segment.head].kv_head for op in said) == sorted({h.kv_head for h in heads})  # each once
        page = to_markdown(compute(sc))
        assert page.count("is computed once and read by") == sc.num_kv_heads, name


def test_custom_mask_is_not_called_a_sliding_window() -> None:
    sc = load_scenario("custom_mask")
    assert sc.mask_kind == "custom"
    assert sc.allow[0, 1] and sc.allow[1, 2]  # it looks ahead: two-sided, not a causal window
    assert "two-sided band" in sc.description and "not" in sc.description
    row = next(line for line in BUILTINS_PAGE.splitlines() if line.startswith("| `custom_mask` |"))
    assert "sliding window" not in row and "two-sided band" in row


def test_scale_one_is_never_told_to_divide_by_root_dk(write) -> None:
    comp = compute(load_scenario(write(BASE + "scale = 1\n" + HEAD)))
    trace = Trace(comp)
    meaning = trace.meaning("scale", 0)
    assert "Divide every score by √dₖ" not in meaning
    assert meaning.startswith("This scenario sets scale = 1: the scores pass through undivided")
    assert "Divide every score by √dₖ" not in to_markdown(comp)
    two = Trace(compute(load_scenario(write(BASE + "scale = 2\n" + HEAD, "two.toml")))).meaning("scale", 0)
    assert two.startswith("Divide every score by 2, the scale this scenario sets.")
    assert "Divide every score by √dₖ" in trace_of_default().meaning("scale", 0)  # the default still says it


def trace_of_default() -> Trace:
    return Trace(compute(load_scenario("i_love_ai")))


async def test_the_app_at_the_scale_stage_with_scale_one(write) -> None:
    from qkv_tui.ui.app import QKVApp
    from qkv_tui.ui.widgets.panels import ExplainPanel

    app = QKVApp(write(BASE + "scale = 1\n" + HEAD))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        text = app.query_one(ExplainPanel).plain
        assert "scale = 1" in text and "Divide every score by √dₖ" not in text


def prose(markdown: str) -> str:
    """A Markdown page without its inline code spans (identifiers, and error messages quoted as printed);
    fenced blocks stay, so their comments are read too."""
    return re.sub(r"`[^`]*`", "", markdown.replace("```", ""))


def test_one_spelling_of_dk_in_what_the_user_reads() -> None:
    """dₖ in prose and formulas; d_k only as a JSON key or an attribute, never in text a student reads."""
    docs = {name: prose(text) for name, text in USER_DOCS.items()}
    d_k = re.compile(r"(?<![A-Za-z])d_k(?![A-Za-z])")  # the word, not the letters inside [shared_kv]
    for where, text in {**TEXTS, "variant notes": str(VARIANT_NOTES), "doc": prose(DOC), **docs}.items():
        assert not d_k.search(text), where
    for path in SCENARIOS:
        assert not d_k.search(path.read_text(encoding="utf-8")), path.name  # comments included
