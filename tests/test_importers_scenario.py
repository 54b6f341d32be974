"""A [model] table end to end: the loader expands it, the engine computes it, and the numbers are the model's own."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import glassllm
import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import ScenarioError, parse_scenario
from qkv_tui.edges.export_toml import to_toml

from .conftest import MODEL_SCENARIOS
from .model_fixtures import build_gpt2, build_llama, gpt2_reference, llama_reference

TEXT = "The cat sat on the mat and the dog slept by the door."


def glass_trace(text: str) -> object:
    model, tok = glassllm.load_pretrained("en")
    tracer = glassllm.Tracer()
    with glassllm.no_grad():
        model.forward(tok.encode(text), trace=tracer)
    return tracer


def model_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "head.toml"
    path.write_text(body, encoding="utf-8")
    return path


@pytest.mark.parametrize("layer", [0, 3])
def test_the_engine_reproduces_glassllms_attention(tmp_path: Path, layer: int) -> None:
    path = model_file(tmp_path, f'[model]\nsource = "glassllm:en"\ntext = "{TEXT}"\nlayer = {layer}\n')
    comp = compute(load_scenario(path))
    tracer = glass_trace(TEXT)
    assert [h.kv_head for h in comp.scenario.heads] == [0, 0, 1, 1]
    for h, head in enumerate(comp.heads):
        np.testing.assert_allclose(head.output, tracer.get("attn.mix", layer, h).value, rtol=2e-4, atol=2e-5)  # type: ignore[attr-defined]
    np.testing.assert_allclose(comp.output, tracer.get("attn.out", layer).value, rtol=2e-4, atol=2e-5)  # type: ignore[attr-defined]


def test_a_chosen_head_keeps_its_kv_head(tmp_path: Path) -> None:
    path = model_file(tmp_path, f'title = "mine"\n[model]\nsource = "glassllm:en"\ntext = "{TEXT}"\nlayer = 1\nheads = [3, 0]\n')
    comp = compute(load_scenario(path))
    tracer = glass_trace(TEXT)
    assert comp.scenario.title == "mine" and [h.name for h in comp.heads] == ["L1 H3", "L1 H0"]
    assert [h.kv_head for h in comp.scenario.heads] == [1, 0] and comp.scenario.W_O is None
    for head, h in zip(comp.heads, (3, 0), strict=True):
        np.testing.assert_allclose(head.output, tracer.get("attn.mix", 1, h).value, rtol=2e-4, atol=2e-5)  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["gpt2", "qwen2"])
def test_the_engine_reproduces_hugging_face_layouts(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "models" / kind
    if kind == "gpt2":
        weights = build_gpt2(folder, dtype="BF16")
    else:
        weights = build_llama(folder, model_type="qwen2", biases=True, dtype="BF16")
    cfg = json.loads((folder / "config.json").read_text())
    path = model_file(tmp_path, f'[model]\nsource = "models/{kind}"\ntext = "Alice was reading the book"\nlayer = 2\n')
    comp = compute(load_scenario(path))
    ids = [int(i) for i in comp.scenario.description.rsplit("ids ", 1)[1].rstrip(".").split()]
    ref = (gpt2_reference if kind == "gpt2" else llama_reference)(weights, cfg, ids, 2)
    for h, head in enumerate(comp.heads):
        np.testing.assert_allclose(head.output, ref["heads"][h], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(comp.output, ref["attn"], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("path", MODEL_SCENARIOS, ids=lambda p: p.stem)
def test_shipped_model_scenarios_load_and_round_trip(path: Path) -> None:
    original = load_scenario(path.stem)
    assert original.description and len(original.heads) >= 1
    again = parse_scenario(to_toml(original), "frozen.toml")
    a, b = compute(original), compute(again)
    for ha, hb in zip(a.heads, b.heads, strict=True):
        np.testing.assert_array_equal(ha.weights, hb.weights)
        np.testing.assert_array_equal(ha.output, hb.output)
    assert [h.kv_head for h in again.heads] == [h.kv_head for h in original.heads]


def test_the_previous_word_head_does_what_its_description_says() -> None:
    comp = compute(load_scenario("glassllm_previous_word"))
    tokens, weights = comp.scenario.tokens, comp.heads[0].weights
    assert tokens[6:9] == ("▁the", "▁m", "at")
    assert weights[7].argmax() == 6 and weights[8].argmax() == 6  # both pieces of "mat" look at "the"
    dog = tokens.index("▁do")
    assert tokens[dog + 1] == "g" and weights[dog].argmax() == weights[dog + 1].argmax() == dog - 1


# --- the command line ----------------------------------------------------------------------


def test_model_options_open_a_head_and_export_it(cli, tmp_path: Path) -> None:
    run = cli("--model", "glassllm:en", "--text", "Alice was beginning", "--layer", "2", "--heads", "1,3", "--export", "toml")
    assert run.code == 0 and run.err == ""
    frozen = parse_scenario(run.out, "frozen.toml")
    assert frozen.title == "glassllm:en · layer 2" and [h.name for h in frozen.heads] == ["L2 H1", "L2 H3"]
    assert [h.kv_head for h in frozen.heads] == [0, 1]
    check = cli("--model", "glassllm:en", "--text", "Alice was beginning", "--check")
    assert check.code == 0 and check.out.startswith("ok: glassllm:en: ")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "glassllm:en", "--text", "hi", "--layer", "9"], "error: glassllm:en: --layer 9 is out of range"),
        (["--model", "glassllm:en", "--text", "hi", "--heads", "1,x"], "error: argument --heads: 'x' is not a whole number"),
        (["--model", "glassllm:en"], "error: --model needs --text"),
        (["--text", "hi"], "error: --text, --layer and --heads go with --model SOURCE"),
        (["--model", "glassllm:en", "--text", "hi", "i_love_ai"], "error: give either SCENARIO or --model, not both"),
        (["--model", "glassllm:en", "--text", "hi", "--serve"], "error: --serve needs a SCENARIO file"),
        (["--model", "./no/such/folder", "--text", "hi"], "error: ./no/such/folder: model.source './no/such/folder': no such folder"),
    ],
)
def test_model_option_errors(cli, args: list[str], needle: str) -> None:
    run = cli(*args)
    assert run.code == 2 and run.out == "" and run.err.startswith(needle) and run.err.count("\n") == 1


def test_bad_model_file_is_one_error_line(cli, tmp_path: Path) -> None:
    path = model_file(tmp_path, '[model]\nsource = "glassllm:en"\ntext = ""\n')
    run = cli("--check", str(path))
    assert run.code == 2 and run.err == f"error: {path}: model.text is empty; expected a sentence to run through the model\n"


def test_without_glassllm_the_builtin_says_how_to_install_it(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    from qkv_tui.importers.glass import open_glassllm

    open_glassllm.cache_clear()
    monkeypatch.setitem(sys.modules, "glassllm", None)
    try:
        run = cli("--check", "glassllm_previous_word", "i_love_ai")
    finally:
        open_glassllm.cache_clear()
    assert run.code == 2 and run.out.startswith("ok: i_love_ai")
    assert run.err == ("error: glassllm_previous_word: model.source glassllm:en needs the glassllm package, which is not"
                       " installed; it is one of qkv-tui's own dependencies: pip install glassllm (or reinstall qkv-tui)\n")


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("layer = 0x" + "f" * 4000, "model.layer = an integer of about 4,817 digits is out of range"),
        ('heads = "' + "x" * 5000 + '"', "model.heads must be a non-empty list of head numbers (0 … 3), got a string ('xxx"),
        ('text = "hi"\n"' + "k" * 5000 + '" = 1', "unknown key 'kkk"),
    ],
    ids=["huge-hex-layer", "long-string", "long-key"],
)
def test_hostile_model_values_are_one_short_error_line(cli, tmp_path: Path, line: str, needle: str) -> None:
    """Found by a fuzzer: a huge integer crashed while being formatted; long values flooded the line."""
    text = "" if line.startswith("text") else 'text = "hi"\n'
    path = model_file(tmp_path, f'[model]\nsource = "glassllm:en"\n{text}{line}\n')
    run = cli("--check", str(path))
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1, run.err[:300]
    assert needle in run.err and len(run.err) < 400 and "Traceback" not in run.err


def test_a_model_error_is_a_scenario_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"head\.toml: unknown key 'layers' in \[model\]; did you mean 'layer'\?"):
        load_scenario(model_file(tmp_path, '[model]\nsource = "glassllm:en"\ntext = "hi"\nlayers = 1\n'))


KV = '''tokens = ["a", "b"]
X = [[1, 0], [0, 1]]
[[heads]]
W_Q = [[1, 0], [0, 1]]
W_K = [[1, 2], [3, 4]]
W_V = [[1, 0], [0, 1]]
kv_head = 1
[[heads]]
W_Q = [[0, 1], [1, 0]]
W_K = [[1, 2], [3, 4]]
W_V = [[1, 0], [0, 1]]
kv_head = 1
'''


def test_kv_head_in_heads_tables() -> None:
    sc = parse_scenario(KV, "kv.toml")
    assert [sc.kv_head(h) for h in range(2)] == [1, 1]
    comp = compute(sc)
    np.testing.assert_array_equal(comp.heads[0].K, comp.heads[1].K)
    different = KV[: KV.rindex("W_K")] + "W_K = [[1, 2], [3, 5]]\nW_V = [[1, 0], [0, 1]]\nkv_head = 1\n"
    with pytest.raises(ScenarioError, match=r"\[\[heads\]\] #2 has kv_head = 1 like \[\[heads\]\] #1, but a different W_K;"):
        parse_scenario(different, "kv.toml")
    for bad in ("-1", "1.5", "true", '"1"'):
        with pytest.raises(ScenarioError, match=r"\[\[heads\]\] #1 kv_head must be a whole number >= 0"):
            parse_scenario(KV.replace("kv_head = 1", f"kv_head = {bad}", 1), "kv.toml")
