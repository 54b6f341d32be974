"""The cost view's and --export cost's figures against a count made another way: a loop over every multiply-add
of each product, every exponential, division and root, and every distinct number a stage reads or writes
(collected in a set, so a K/V head shared by query heads is read once because it is one set of numbers).

The figures under test come from each stage's cost face (teach/stages/*.py, core/cost.py), which multiplies
shapes; this loops over cells. Every built-in and generated scenarios (tests/strategies.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings

from qkv_tui.core.cost import DECODE, PREFILL, Count
from qkv_tui.core.scenario import Scenario, builtin_names, parse_scenario
from qkv_tui.teach.cost import report
from qkv_tui.teach.trace import Trace
from tests.builtins import builtin
from tests.strategies import Case, cases

CONTEXT = 5  # small: the count loops over every cell of a decode step at this context


def independent(sc: Scenario, rows: int, keys: int, new: int, b: int,
                decode: bool = False) -> dict[str, tuple[int, int, int, int]]:
    """{stage: (matmul FLOPs, other ops, bytes read, bytes written)} by looping over cells."""
    d, d_in, H = int(sc.X.shape[1]), int(sc.X_kv.shape[1]), len(sc.heads)
    owners: dict[int, int] = {}
    for h in range(H):
        owners.setdefault(sc.kv_head(h), h)
    x = "X̂" if sc.norm is not None else "X"
    out: dict[str, tuple[int, int, int, int]] = {}

    def cells(name: object, r: int, c: int) -> set[Any]:
        return {(name, i, j) for i in range(r) for j in range(c)}

    def put(stage: str, mm: int, other: int, read: set[Any], written: set[Any]) -> None:
        out[stage] = (mm, other, len(read) * b, len(written) * b)

    put("embed", 0, 0, cells("rows", rows, d), cells("X", rows, d))
    if sc.norm is not None:
        other = 0
        for _ in range(rows):
            other += 1 + 1 + (1 if sc.norm.kind == "layer" else 0)  # the root, the mean's division, the variance's
            other += sum(1 for _ in range(d))  # each cell divided
        norm_read = cells("X", rows, d) | cells("γ", 1, d) | (cells("β", 1, d) if sc.norm.beta is not None else set())
        put("norm", 0, other, norm_read, cells("X̂", rows, d))
    if sc.mla is None:
        mm = 0
        read: set[Any] = cells(x, rows, d)
        written: set[Any] = set()
        for h, head in enumerate(sc.heads):
            for _i in range(rows):
                for _c in range(head.d_k):
                    for _t in range(d):
                        mm += 2
            read |= cells(("W_Q", h), d, head.d_k)
            written |= cells(("Q", h), rows, head.d_k)
            if head.b_Q is not None:
                read |= cells(("b_Q", h), 1, head.d_k)
        for g, h in owners.items() if "shared_kv" not in sc.parts else ():  # [shared_kv]: K and V are another layer's
            head = sc.heads[h]
            for width, name in ((head.W_K.shape[1], "K"), (head.W_V.shape[1], "V")):
                for _j in range(new):
                    for _c in range(int(width)):
                        for _t in range(d_in):
                            mm += 2
                if new:
                    read |= cells((f"W_{name}", g), d_in, int(width))
                    written |= cells((name, g), new, int(width))
                    bias = head.b_K if name == "K" else head.b_V
                    if bias is not None:
                        read |= cells((f"b_{name}", g), 1, int(width))
            if new and sc.is_cross:
                read |= cells("context X", new, d_in)
        put("project", mm, 0, read, written)
    ix = sc.parts.get("indexer")
    attended, seen = keys, keys  # the keys each row's heads attend, and those whose K and V they read
    if ix is not None:
        attended = min(keys, ix.top_k)
        seen = attended if decode else keys
        index_stages(sc, ix, rows, keys, new, put, cells)
        # Select: a comparison a score, I read, each row's kept keys written as 32-bit indices whatever the dtype
        out["select"] = (0, rows * keys, len(cells("I", rows, keys)) * b, rows * attended * 4)
    if sc.mla is not None:
        mla_stages(sc, rows, keys, new, put, cells, attended, seen)
    if sc.linear is not None:
        linear_stages(sc, rows, keys, new, put, cells, decode)
    if getattr(sc, "deltanet", None) is not None:
        delta_stages(sc, rows, new, put, cells, decode)
    qk = {h: (("Q", h), ("K", sc.kv_head(h))) for h in range(H)}
    if sc.qk_norm is not None:
        qn = sc.qk_norm
        other = 0
        read, written = cells("γ_q", 1, int(qn.gamma_q.size)) | cells("γ_k", 1, int(qn.gamma_k.size)), set()
        for h, head in enumerate(sc.heads):
            read |= cells(("Q", h), rows, head.d_k)
            written |= cells(("Q̂", h), rows, head.d_k)
        for g, h in owners.items():
            read |= cells(("K", g), new, sc.heads[h].d_k)
            written |= cells(("K̂", g), new, sc.heads[h].d_k)
        if qn.over == "head":
            other = sum(1 + 1 + sc.heads[h].d_k for h in range(H) for _ in range(rows))
            other += sum(1 + 1 + sc.heads[h].d_k for h in owners.values() for _ in range(new))
        else:
            other = rows * (2 + sum(hd.d_k for hd in sc.heads)) + new * (2 + sum(sc.heads[h].d_k for h in owners.values()))
        put("qk_norm", 0, other, read, written)
    if sc.rope is not None:
        read, written = set(), set()
        for h, head in enumerate(sc.heads):
            read |= cells(("Q", h), rows, head.d_k)
            written |= cells(("Q'", h), rows, head.d_k)
        for g, h in owners.items():
            read |= cells(("K", g), new, sc.heads[h].d_k)
            written |= cells(("K'", g), new, sc.heads[h].d_k)
        put("rotate", 0, 0, read, written)
    mm, read, written = 0, set(), set()
    for h, head in enumerate(sc.heads):
        for _i in range(rows):
            for _j in range(attended):
                for _c in range(head.d_k):
                    mm += 2
        read |= cells(qk[h][0], rows, head.d_k) | cells(qk[h][1], seen, head.d_k)
        written |= cells(("scores", h), rows, attended)
    put("score", mm, 0, read, written)
    other = 0
    for head in sc.heads:
        for _ in range(rows * attended):
            other += 1 + (2 if head.softcap is not None else 0)  # the division; a cap's tanh and its division by c
    put("scale", 0, other, {(("scores", h), i, j) for h in range(H) for i in range(rows) for j in range(attended)},
        {(("scaled", h), i, j) for h in range(H) for i in range(rows) for j in range(attended)})
    other = sum(2 * attended + (1 if head.sink is not None else 0) for head in sc.heads for _ in range(rows))
    put("softmax", 0, other, {(("scaled", h), i, j) for h in range(H) for i in range(rows) for j in range(attended)},
        {(("weights", h), i, j) for h in range(H) for i in range(rows) for j in range(attended)})
    mm, read, written = 0, set(), set()
    for h, head in enumerate(sc.heads):
        for _i in range(rows):
            for _c in range(head.d_v):
                for _j in range(attended):
                    mm += 2
        read |= cells(("weights", h), rows, attended) | cells(("V", sc.kv_head(h)), seen, head.d_v)
        written |= cells(("out", h), rows, head.d_v)
    put("mix", mm, 0, read, written)
    gated = [h for h, head in enumerate(sc.heads) if head.W_G is not None]
    if gated:
        mm, other, read, written = 0, 0, cells(x, rows, d), set()
        for h in gated:
            dv = sc.heads[h].d_v
            mm += sum(2 for _ in range(rows * dv * d))
            other += 2 * rows * dv  # σ: an exponential and a division a cell
            read |= cells(("W_G", h), d, dv) | cells(("out", h), rows, dv)
            written |= cells(("gated", h), rows, dv)
        put("gate", mm, other, read, written)
    total_dv = sum(head.d_v for head in sc.heads)
    if H > 1:
        put("concat", 0, 0, cells("outs", rows, total_dv), cells("concat", rows, total_dv))
    if sc.W_O is not None:
        d_out = int(sc.W_O.shape[1])
        read = cells("concat", rows, total_dv) | cells("W_O", total_dv, d_out)
        read |= cells("b_O", 1, d_out) if sc.b_O is not None else set()
        put("wo", sum(2 for _ in range(rows * total_dv * d_out)), 0, read, cells("final", rows, d_out))
    return out


def index_stages(sc: Scenario, ix: Any, rows: int, keys: int, new: int, put: Any, cells: Any) -> None:
    """[indexer]'s Index, cell by cell: the index query, key and weights, every query row against every key in each
    index head, and the weighted sum."""
    d, H, dI = int(sc.X.shape[1]), ix.num_heads, ix.d_index
    d_q = int(ix.W_q.shape[0])
    x = "X̂" if sc.norm is not None else "X"
    mm = sum(2 for _ in range(rows * d_q * H * dI)) + sum(2 for _ in range(new * d * dI))
    mm += sum(2 for _ in range(rows * d * H))
    mm += sum(2 for _i in range(rows) for _s in range(keys) for _j in range(H) for _c in range(dI))
    mm += sum(2 for _i in range(rows) for _s in range(keys) for _j in range(H))
    other = rows * H + (sum(1 + dI + 2 for _ in range(new)) if ix.k_norm else 0)
    read = cells(x, rows, d) | cells("W_q", d_q, H * dI) | cells("W_k", d, dI) | cells("W_w", d, H)
    read |= cells("k_I", keys, dI) | (cells("c_Q", rows, d_q) if ix.from_latent else set())
    put("index", mm, other, read, cells("new k_I", new, dI) | cells("I", rows, keys))


def mla_stages(sc: Scenario, rows: int, keys: int, new: int, put: Any, cells: Any, attended: int | None = None,
               seen: int | None = None) -> None:
    """[mla]'s Compress, Expand, Rotate and Absorb, cell by cell."""
    mla = sc.mla
    assert mla is not None
    d, H = int(sc.X.shape[1]), mla.num_heads
    x = "X̂" if sc.norm is not None else "X"
    dc, dr, dn, dv, dqk = mla.d_c, mla.d_rope, mla.d_nope, mla.d_v, mla.d_nope + mla.d_rope
    mm, other = 0, 0
    read = cells(x, rows, d) | cells("W_DKV", d, dc) | cells("W_KR", d, dr)
    written = cells("c_KV", new, dc) | cells("k_R", new, dr)
    for _ in range(new * (dc + dr) * d):
        mm += 2
    if mla.kv_norm:
        other += new * (2 + dc)  # a root, the mean's division and one a cell
        read |= cells("γ_kv", 1, dc)
        written |= cells("c_KV normed", new, dc)
    if mla.d_cq is not None:
        mm += sum(2 for _ in range(rows * mla.d_cq * d))
        read |= cells("W_DQ", d, mla.d_cq)
        written |= cells("c_Q", rows, mla.d_cq)
        if mla.q_norm:
            other += rows * (2 + mla.d_cq)
            read |= cells("γ_q", 1, mla.d_cq)
            written |= cells("c_Q normed", rows, mla.d_cq)
    put("compress", mm, 0 + other, read, written)
    attended = keys if attended is None else attended  # the keys each row's heads attend (a selection's top_k)
    seen = keys if seen is None else seen  # the keys whose latents the heads read
    src, src_w = ("c_Q", mla.d_cq) if mla.d_cq is not None else (x, d)
    mm, read, written = 0, cells(src, rows, src_w) | cells("c_KV", seen, dc), set()
    for h in range(H):
        mm += sum(2 for _ in range(rows * dqk * src_w)) + sum(2 for _ in range(seen * (dn + dv) * dc))
        read |= cells(("W_Q", h), src_w, dqk) | cells(("W_UK", h), dc, dn) | cells(("W_UV", h), dc, dv)
        written |= cells(("q", h), rows, dqk) | cells(("k_C", h), seen, dn) | cells(("v_C", h), seen, dv)
    put("expand", mm, 0, read, written)
    if mla.rope is not None:
        read, written = cells("k_R", new, dr), cells("k_R'", new, dr)
        for h in range(H):
            read |= cells(("q_R", h), rows, dr)
            written |= cells(("q_R'", h), rows, dr)
        put("mla_rotate", 0, 0, read, written)
    mm, read, written = 0, cells("c_KV", seen, dc) | cells("k_R", seen, dr), set()
    for h in range(H):
        for _ in range(rows):
            mm += 2 * dn * dc  # q_L's row
            mm += sum(2 * (dc + dr) for _ in range(attended))  # a score per key
            mm += sum(2 * attended for _ in range(dc))  # the weights mixing each latent column
            mm += sum(2 * dc for _ in range(dv))  # ·W_UV
        read |= cells(("q_C", h), rows, dn) | cells(("W_UK", h), dc, dn) | cells(("q_R", h), rows, dr)
        read |= cells(("weights", h), rows, attended) | cells(("W_UV", h), dc, dv)
        written |= cells(("q_L", h), rows, dc) | cells(("scores_L", h), rows, attended) | cells(("mix_L", h), rows, dc)
        written |= cells(("out_L", h), rows, dv)
    put("absorb", mm, 0, read, written)


def linear_stages(sc: Scenario, rows: int, keys: int, new: int, put: Any, cells: Any, decode: bool) -> None:
    """[linear]'s Feature, Quadratic and Recurrent, cell by cell (one K/V head per head, self-attention)."""
    assert sc.linear is not None
    normalised = sc.linear.normalize
    other, read, written = 0, set(), set()
    for h, head in enumerate(sc.heads):
        if sc.linear.feature == "elu1":
            other += sum(1 for _ in range((rows + new) * head.d_k))
        read |= cells(("Q", h), rows, head.d_k) | cells(("K", h), new, head.d_k)
        written |= cells(("φQ", h), rows, head.d_k) | cells(("φK", h), new, head.d_k)
    put("phi", 0, other, read, written)
    mm, other, read, written = 0, 0, set(), set()
    for h, head in enumerate(sc.heads):
        for _i in range(rows):
            for _j in range(keys):
                mm += 2 * head.d_k + 2 * head.d_v  # A's cell, and its share of every output cell
                other += 1 if normalised else 0
        read |= cells(("φQ", h), rows, head.d_k) | cells(("φK", h), keys, head.d_k) | cells(("V", h), keys, head.d_v)
        written |= cells(("A", h), rows, keys) | (cells(("W", h), rows, keys) if normalised else set())
        written |= cells(("out", h), rows, head.d_v)
    put("quadratic", mm, other, read, written)
    mm, other, read, written = 0, 0, set(), set()
    for h, head in enumerate(sc.heads):
        for _t in range(rows):
            for _a in range(head.d_k):
                for _b in range(head.d_v):
                    mm += 2 + 2  # the outer product's cell into S, and S's cell into φ(q)ᵀS
            if normalised:
                mm += 2 * head.d_k
                other += head.d_v
        read |= cells(("φQ", h), rows, head.d_k) | cells(("φK", h), rows, head.d_k) | cells(("V", h), rows, head.d_v)
        if decode:
            read |= cells(("S", h), head.d_k, head.d_v) | (cells(("z", h), 1, head.d_k) if normalised else set())
        written |= {(("S", h, t), a, b) for t in range(rows) for a in range(head.d_k) for b in range(head.d_v)}
        written |= cells(("z", h), rows, head.d_k) if normalised else set()
        written |= cells(("o", h), rows, head.d_v)
    put("recurrent", mm, other, read, written)


def delta_stages(sc: Scenario, rows: int, new: int, put: Any, cells: Any, decode: bool) -> None:
    """[deltanet]'s Normalise, Gates and Delta, cell by cell (the kernel's loop, kernels/deltanet.py, read as counts)."""
    cfg = sc.deltanet
    assert cfg is not None
    d, H = int(sc.X.shape[1]), len(sc.heads)
    other, read, written = 0, set(), set()
    for h, head in enumerate(sc.heads):
        for _ in range(rows):
            other += 1 + head.d_k + head.d_k  # the row's root, its divisions by it, and by √d_k
        for _ in range(new):
            other += 1 + head.d_k
        read |= cells(("Q", h), rows, head.d_k) | cells(("K", h), new, head.d_k)
        written |= cells(("q", h), rows, head.d_k) | cells(("k", h), new, head.d_k)
    put("l2norm", 0, other, read, written)
    x = "X̂" if sc.norm is not None else "X"
    mm, other = 0, 0
    read, written = cells(x, rows, d), set()
    kg = cfg.channels  # a gate per key channel (Kimi Delta Attention): g for each channel, from a low-rank projection
    if kg is not None and kg.g is not None:
        pass  # g given: only β (where W_b is given) is computed below
    elif kg is not None:
        r = int(kg.W_fa.shape[1])
        mm += rows * 2 * d * r  # X̂·W_fa, shared by every head and channel
        read |= cells("W_fa", d, r)
    for h in range(H) if kg is not None else ():
        d_k = sc.heads[h].d_k
        if kg.g is None:
            other += 1  # e^A_log
            for _ in range(rows):
                mm += d_k * 2 * r  # each channel's cell of (X̂·W_fa)·W_fb
                other += d_k * 2  # each channel's softplus: e^a and the log
            read |= cells(("W_fb", h), r, d_k) | cells(("dt_bias", h), 1, d_k) | cells(("A_log", h), 1, 1)
            written |= cells(("g", h), rows, d_k)
        if cfg.W_b is not None:
            mm += rows * 2 * d
            other += rows * 2
            read |= cells(("W_b", h), d, 1)
            written |= cells(("β", h), rows, 1)
    for h in range(H) if kg is None else ():
        other += 1  # e^A_log
        for _ in range(rows):
            mm += 2 * d  # X̂·W_a's cell
            other += 2  # softplus: e^a and the log
            if cfg.W_b is not None:
                mm += 2 * d
                other += 2  # σ: an exponential and a division
        read |= cells(("W_a", h), d, 1) | cells(("dt_bias", h), 1, 1) | cells(("A_log", h), 1, 1)
        read |= cells(("W_b", h), d, 1) if cfg.W_b is not None else set()
        written |= cells(("g", h), rows, 1) | cells(("β", h), rows, 1)
    put("gates", mm, other, read, written)
    mm, other, read, written = 0, 0, set(), set()
    for h, head in enumerate(sc.heads):
        g_width = 1 if kg is None else head.d_k  # one e^g a token, or one a key channel
        for t in range(rows):
            other += g_width  # e^g
            for _a in range(head.d_k):
                for _b in range(head.d_v):
                    mm += 6  # the recall's, the write's and the read's multiply-add
            for name, width in (("decayed", head.d_k * head.d_v), ("S", head.d_k * head.d_v), ("kv", head.d_v),
                                ("δ", head.d_v), ("o", head.d_v)):
                written |= cells((name, h, t), 1, width)
        read |= cells(("q", h), rows, head.d_k) | cells(("k", h), rows, head.d_k) | cells(("v", h), rows, head.d_v)
        read |= cells(("g", h), rows, g_width) | cells(("β", h), rows, 1)
        read |= cells(("S", h), head.d_k, head.d_v) if decode else set()
    put("delta", mm, other, read, written)


def figures_recompute(c: Count) -> None:
    """Each figure's printed formula gives its printed result: the calculator rule."""
    for f in (c.matmul, c.other, c.read, c.written):
        text = f.text()
        if "=" not in text:
            assert text == "0" or int(text.split(" ")[-1]) == f.value
            continue
        left, right = text.rsplit(" = ", 1)
        total = 0
        for part in left.split(" + "):
            product = 1
            for factor in re.findall(r"(?:^|\s)(\d+(?:·\d+)*)$", part)[0].split("·"):
                product *= int(factor)
            total += product
        assert total == int(right) == f.value, text


def check(sc: Scenario, comp: object) -> None:
    r = report(comp, "bf16", CONTEXT)  # type: ignore[arg-type]
    b = 2
    window = sc.window if sc.window is not None and not sc.is_cross else None
    decode_keys = sc.m if sc.is_cross else (CONTEXT if window is None else min(CONTEXT, window))
    phase_sizes = {PREFILL: (sc.n, sc.m, sc.m), DECODE: (1, decode_keys, 0 if sc.is_cross else 1)}
    counted = {(c.stage, c.phase): c for c in r.counts}
    ran = [s.stage.key for s in Trace(comp).specs]  # type: ignore[arg-type]
    for phase, (rows, keys, new) in phase_sizes.items():
        want = independent(sc, rows, keys, new, b, phase == DECODE)
        for key in ran:
            if (key, phase) not in counted:
                assert key not in want or key in {u.stage for u in r.uncounted}
                continue
            c = counted[(key, phase)]
            assert (c.matmul.value, c.other.value, c.read.value, c.written.value) == want[key], (sc.title, key, phase)
            figures_recompute(c)
    assert {u.stage for u in r.uncounted}.isdisjoint(want), "a stage the loop counts is listed as not counted"


@pytest.mark.parametrize("name", builtin_names())
def test_every_builtin_counts_as_the_loop_does(name: str) -> None:
    comp = builtin(name)
    check(comp.scenario, comp)


@settings(max_examples=40, deadline=None)
@given(cases())
def test_generated_scenarios_count_as_the_loop_does(case: Case) -> None:
    from qkv_tui import compute

    comp = compute(parse_scenario(case.toml, "generated.toml"))
    check(comp.scenario, comp)


def test_the_count_can_fail() -> None:
    """A face that forgot the K/V sharing (every query head reading its own K) would differ from the loop."""
    comp = builtin("gqa")
    sc = comp.scenario
    loop = independent(sc, sc.n, sc.m, sc.m, 2)
    c = next(c for c in report(comp, "bf16", CONTEXT).counts if c.stage == "score" and c.phase == PREFILL)
    per_query_head = sum(sc.m * head.d_k for head in sc.heads) * 2 + sum(sc.n * head.d_k for head in sc.heads) * 2
    assert c.read.value == loop["score"][2] != per_query_head
