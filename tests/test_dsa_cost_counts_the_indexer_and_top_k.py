"""The cost view and ``--export cost`` of DeepSeek Sparse Attention count what it computes: the indexer's own work
(Index: its q_I, k_I, w and the q_I·k_I scores of every query row against EVERY key; Select: a top-k pass, a
comparison a score and no arithmetic, writing 32-bit indices), the heads' Score, Scale, Softmax and Mix over
each row's top_k keys only (at decode the K and V of those top_k, not of the whole context), and the index key
k_I (d_I numbers a token) in the KV cache. The expected figures are worked here from the file's sizes read with
tomllib, not from qkv_tui's shapes; the pages say the same in words, and every figure on them recomputes."""

from __future__ import annotations

import io
import json
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.cost import DECODE, PREFILL
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.edges.cli import _export_cost
from qkv_tui.teach.cost import report

from . import test_cost_view_figures_recompute as recompute
from .test_cost_matches_an_independent_count import check
from .test_indexer_lines_check_out import CASES

TEXT = (Path(__file__).resolve().parents[1] / "scenarios" / "dsa.toml").read_text(encoding="utf-8")
DOC = tomllib.loads(TEXT)
N, B = 4096, 2  # the default context, bf16


def _sizes() -> dict[str, int]:
    ix, head = DOC["indexer"], DOC["heads"][0]
    W_k, W_q = np.array(ix["W_k"]), np.array(ix["W_q"])
    return {"n": len(DOC["X"]), "d": len(DOC["X"][0]), "H": ix["num_heads"], "dI": W_k.shape[1],
            "dq": W_q.shape[0], "top_k": ix["top_k"], "dk": np.array(head["W_K"]).shape[1],
            "dv": np.array(head["W_V"]).shape[1]}


def _figures(phase: str) -> dict[str, tuple[int, int, int, int]]:
    r = report(compute(parse_scenario(TEXT, "dsa.toml")), "bf16", N)
    return {c.stage: (c.matmul.value, c.other.value, c.read.value, c.written.value) for c in r.phase(phase)}


def test_decode_counts_every_key_for_the_indexer_and_top_k_for_the_heads() -> None:
    s = _sizes()
    got = _figures(DECODE)
    H, dI, d, k = s["H"], s["dI"], s["d"], s["top_k"]
    index_flops = 2 * s["dq"] * H * dI + 2 * d * dI + 2 * d * H + 2 * N * H * dI + 2 * N * H
    index_read = (d + s["dq"] * H * dI + d * dI + d * H + N * dI) * B
    assert got["index"] == (index_flops, H, index_read, (dI + N) * B)
    assert got["select"] == (0, N, N * B, k * 4)  # a comparison a score; the kept keys as int32 indices
    assert got["score"] == (2 * k * s["dk"], 0, (s["dk"] + k * s["dk"]) * B, k * B)
    assert got["scale"] == (0, k, k * B, k * B)
    assert got["softmax"] == (0, 2 * k, k * B, k * B)
    assert got["mix"] == (2 * k * s["dv"], 0, (k + k * s["dv"]) * B, s["dv"] * B)


def test_prefill_scores_every_cell_in_the_indexer_and_top_k_a_row_in_the_heads() -> None:
    s = _sizes()
    got = _figures(PREFILL)
    n, k = s["n"], s["top_k"]
    assert got["index"][0] == (2 * n * s["dq"] * s["H"] * s["dI"] + 2 * n * s["d"] * s["dI"] + 2 * n * s["d"] * s["H"]
                               + 2 * n * n * s["H"] * s["dI"] + 2 * n * n * s["H"])
    assert got["select"] == (0, n * n, n * n * B, n * k * 4)
    assert got["score"][0] == 2 * n * k * s["dk"] and got["mix"][0] == 2 * n * k * s["dv"]
    # every key's K and V is read once: the rows' selections together may reach each one
    assert got["score"][2] == (n * s["dk"] + n * s["dk"]) * B


def test_the_kv_cache_holds_the_index_key() -> None:
    s = _sizes()
    out = io.StringIO()
    _export_cost(parse_scenario(TEXT, "dsa.toml"), out, "fp8", 1000)
    doc = json.loads(out.getvalue())
    per_token = (s["dk"] + s["dv"]) * 1 + s["dI"] * 1  # K and V of the one K/V head, and k_I, at 1 byte a number
    assert doc["kv_cache"]["bytes_per_token"] == per_token and doc["kv_cache"]["bytes_at_context"] == 1000 * per_token
    assert {"index", "select"} <= {st["stage"] for st in doc["stages"]}


def test_top_k_covering_the_context_is_full_attention_again() -> None:
    r = report(compute(parse_scenario(TEXT, "dsa.toml")), "bf16", 2)  # a context of top_k keys: nothing dropped
    assert r.decode.attended is None
    score = next(c for c in r.phase(DECODE) if c.stage == "score")
    assert score.matmul.value == 2 * 2 * _sizes()["dk"]


def test_the_pages_say_it_and_every_figure_recomputes() -> None:
    text = "\n".join(recompute.pages("dsa", "bf16", N))
    assert "the heads attend top_k = 2 of them a row" in text
    assert "not counted" not in text
    assert re.search(r"K\+V 4·2·1 \+ index key k_I 2·2 = 12 B a token", text)
    assert "DeepSeek-V3.2 caches it in FP8" in text
    for dtype, context in (("bf16", N), ("fp32", 3)):
        recompute.test_every_figure_recomputes_from_what_it_prints("dsa", dtype, context)


@pytest.mark.parametrize("name", CASES)
def test_the_latent_and_the_normed_indexer_count_as_the_loop_does(name: str) -> None:
    """W_q reading [mla]'s c_Q (its read counted), the absorbed form over top_k latents, k_norm's roots and
    divisions: each against the independent cell-by-cell loop."""
    comp = compute(parse_scenario(CASES[name], f"{name}.toml"))
    check(comp.scenario, comp)
