"""[mla], DeepSeek's multi-head latent attention: against an independent torch implementation written the way
transformers' DeepseekV3Attention computes (and against that module itself), the absorbed form against the
expanded one, its errors, its exports and its editing."""

from __future__ import annotations

import io
import json
import math
import re

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import ScenarioError, parse_scenario
from qkv_tui.edges.export_json import write_json
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.kernels.mla import MlaHead
from qkv_tui.teach.handcalc import compute_hand

torch = pytest.importorskip("torch")

BASE = '''
tokens = ["I", "love", "AI"]
X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
mask = "causal"
'''
MLA = '''
[mla]
num_heads = 2
d_nope = 2
d_rope = 2
d_v = 2
W_DKV = [[1, 0], [0, 0], [0, 1], [1, 0]]
W_UK = [[1, 0, 0, 1], [0, 1, 1, 0]]
W_UV = [[1, 0, 1, 1], [0, 1, 0, 1]]
W_KR = [[0, 1], [1, 0], [0, 0], [0, 1]]
'''
W_Q = "W_Q = [[1, 0, 0, 1, 0, 1, 1, 0], [0, 1, 1, 0, 1, 0, 0, 1], [1, 0, 0, 0, 0, 0, 1, 0], [0, 0, 0, 1, 1, 1, 0, 0]]\n"
ROPE = '[rope]\nlayout = "interleaved"\n'


def _text(mat: np.ndarray) -> str:
    return "[" + ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in mat) + "]"


def random_mla(seed: int, *, n: int = 5, d_model: int = 6, H: int = 3, d_c: int = 3, d_nope: int = 2, d_rope: int = 4,
               d_v: int = 3, d_cq: int | None = 4, norms: bool = True) -> tuple[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    w = {
        "X": rng.normal(size=(n, d_model)), "W_DKV": rng.normal(size=(d_model, d_c)),
        "W_UK": rng.normal(size=(d_c, H * d_nope)), "W_UV": rng.normal(size=(d_c, H * d_v)),
        "W_KR": rng.normal(size=(d_model, d_rope)), "W_O": rng.normal(size=(H * d_v, d_model)),
        "gamma_kv": rng.uniform(0.5, 1.5, size=d_c),
    }
    if d_cq is None:
        w["W_Q"] = rng.normal(size=(d_model, H * (d_nope + d_rope)))
    else:
        w["W_DQ"] = rng.normal(size=(d_model, d_cq))
        w["W_UQ"] = rng.normal(size=(d_cq, H * (d_nope + d_rope)))
        w["gamma_q"] = rng.uniform(0.5, 1.5, size=d_cq)
    lines = [f"tokens = {json.dumps([f't{i}' for i in range(n)])}", f"X = {_text(w['X'])}", 'mask = "causal"', "",
             "[mla]", f"num_heads = {H}", f"d_nope = {d_nope}", f"d_rope = {d_rope}", f"d_v = {d_v}"]
    lines += [f"{k} = {_text(w[k])}" for k in ("W_DKV", "W_UK", "W_UV", "W_KR", "W_Q", "W_DQ", "W_UQ") if k in w]
    if norms:
        lines += ["kv_norm = true", f"gamma_kv = {json.dumps(w['gamma_kv'].tolist())}"]
        if d_cq is not None:
            lines += ["q_norm = true", f"gamma_q = {json.dumps(w['gamma_q'].tolist())}"]
    lines += ["", "[rope]", 'layout = "interleaved"', "base = 10000.0", "", "[output]", f"W_O = {_text(w['W_O'])}"]
    return "\n".join(lines) + "\n", w


def torch_deepseek(w: dict[str, np.ndarray], H: int, d_nope: int, d_rope: int, d_v: int, norms: bool,
                   eps: float = 1e-6, base: float = 10000.0) -> dict[str, torch.Tensor]:
    """DeepseekV3Attention.forward, step by step, in float64 (its Linear layers as X @ W, W = weightᵀ)."""
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in w.items()}
    x = t["X"][None]  # (1, n, d_model)
    _, n, _ = x.shape

    def rms(v: torch.Tensor, g: torch.Tensor) -> torch.Tensor:  # DeepseekV3RMSNorm
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * g

    if "W_Q" in t:
        q_states = x @ t["W_Q"]
    else:
        c_q = x @ t["W_DQ"]
        q_states = (rms(c_q, t["gamma_q"]) if norms else c_q) @ t["W_UQ"]
    q_states = q_states.view(1, n, H, d_nope + d_rope).transpose(1, 2)
    q_pass, q_rot = torch.split(q_states, [d_nope, d_rope], dim=-1)
    # kv_a_proj_with_mqa: [W_DKV | W_KR] side by side
    compressed = x @ torch.cat([t["W_DKV"], t["W_KR"]], dim=1)
    kv_nope, k_rot = torch.split(compressed, [t["W_DKV"].shape[1], d_rope], dim=-1)
    if norms:
        kv_nope = rms(kv_nope, t["gamma_kv"])
    k_rot = k_rot.view(1, 1, n, d_rope)
    # rotary embedding: inv_freq = base^(−2i/d), cos/sin of cat(freqs, freqs); the interleaved pairs (x0, x1), …
    inv_freq = 1.0 / (base ** (torch.arange(0, d_rope, 2, dtype=torch.float64) / d_rope))
    freqs = torch.arange(n, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos, sin = torch.cat([freqs, freqs], -1).cos(), torch.cat([freqs, freqs], -1).sin()

    def interleave(v: torch.Tensor) -> torch.Tensor:  # apply_rotary_pos_emb_interleave: evens, then odds
        b, h, s, d = v.shape
        v = v.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
        half = torch.cat((-v[..., d // 2:], v[..., : d // 2]), dim=-1)  # rotate_half
        return v * cos + half * sin

    q_rot, k_rot = interleave(q_rot), interleave(k_rot)
    # kv_b_proj: per head [k_nope | v], its rows the latent's
    d_c = t["W_DKV"].shape[1]
    W_b = torch.cat([torch.cat([t["W_UK"][:, h * d_nope:(h + 1) * d_nope], t["W_UV"][:, h * d_v:(h + 1) * d_v]], 1)
                     for h in range(H)], 1)
    kv = (kv_nope @ W_b).view(1, n, H, d_nope + d_v).transpose(1, 2)
    k_nope, value = torch.split(kv, [d_nope, d_v], dim=-1)
    key = torch.cat([k_nope, k_rot.expand(-1, H, -1, -1)], dim=-1)
    query = torch.cat([q_pass, q_rot], dim=-1)
    scores = query @ key.transpose(2, 3)  # (1, H, n, n)
    mask = torch.triu(torch.full((n, n), float("-inf"), dtype=torch.float64), 1)
    weights = torch.softmax(scores * (d_nope + d_rope) ** -0.5 + mask, dim=-1)
    heads = weights @ value  # (1, H, n, d_v)
    out = heads.transpose(1, 2).reshape(1, n, H * d_v) @ t["W_O"]
    assert d_c == kv_nope.shape[-1]
    return {"scores": scores[0], "weights": weights[0], "heads": heads[0], "output": out[0], "c_KV": kv_nope[0]}


@pytest.mark.parametrize(("seed", "d_cq", "norms"), [(0, 4, True), (1, None, True), (2, None, False), (3, 4, False)])
def test_against_deepseek_v3_attention_in_torch(seed: int, d_cq: int | None, norms: bool) -> None:
    text, w = random_mla(seed, d_cq=d_cq, norms=norms)
    comp = compute(parse_scenario(text, "mla.toml"))
    ref = torch_deepseek(w, 3, 2, 4, 3, norms)
    for h, hr in enumerate(comp.heads):
        np.testing.assert_allclose(hr.scores, ref["scores"][h].numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(hr.weights, ref["weights"][h].numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(hr.output, ref["heads"][h].numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(comp.output, ref["output"].numpy(), rtol=1e-12, atol=1e-12)
    assert comp.heads[0].part(MlaHead) is not None
    np.testing.assert_allclose(comp.heads[0].part(MlaHead).shared.c_KV, ref["c_KV"].numpy(), rtol=1e-12, atol=1e-12)


def test_against_transformers_own_module() -> None:
    """The very DeepseekV3Attention of transformers, eager, with the scenario's weights."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    text, w = random_mla(7, d_cq=4, norms=True)
    config = transformers.DeepseekV3Config(
        hidden_size=6, num_attention_heads=3, num_key_value_heads=3, q_lora_rank=4, kv_lora_rank=3,
        qk_nope_head_dim=2, qk_rope_head_dim=4, v_head_dim=3, rope_theta=10000.0, attention_bias=False,
        rms_norm_eps=1e-6, rope_interleave=True, intermediate_size=8, moe_intermediate_size=8, num_hidden_layers=1,
        vocab_size=16, n_routed_experts=2, num_experts_per_tok=1, first_k_dense_replace=1,
    )
    config._attn_implementation = "eager"
    attn = ds.DeepseekV3Attention(config, layer_idx=0).double()
    H, d_nope, d_v = 3, 2, 3
    W_b = np.concatenate([np.concatenate([w["W_UK"][:, h * d_nope:(h + 1) * d_nope], w["W_UV"][:, h * d_v:(h + 1) * d_v]],
                                         1) for h in range(H)], 1)
    with torch.no_grad():
        attn.q_a_proj.weight.copy_(torch.tensor(w["W_DQ"].T))
        attn.q_a_layernorm.weight.copy_(torch.tensor(w["gamma_q"]))
        attn.q_b_proj.weight.copy_(torch.tensor(w["W_UQ"].T))
        attn.kv_a_proj_with_mqa.weight.copy_(torch.tensor(np.concatenate([w["W_DKV"], w["W_KR"]], 1).T))
        attn.kv_a_layernorm.weight.copy_(torch.tensor(w["gamma_kv"]))
        attn.kv_b_proj.weight.copy_(torch.tensor(W_b.T))
        attn.o_proj.weight.copy_(torch.tensor(w["W_O"].T))
        x = torch.tensor(w["X"])[None]
        n = x.shape[1]
        # DeepseekV3RotaryEmbedding's cos and sin, cat(freqs, freqs), in float64 (the module makes them in float32)
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 4, 2, dtype=torch.float64) / 4))
        freqs = torch.arange(n, dtype=torch.float64)[:, None] * inv_freq[None, :]
        emb = torch.cat([freqs, freqs], -1)[None]
        mask = torch.triu(torch.full((n, n), float("-inf"), dtype=torch.float64), 1)[None, None]
        out, weights = attn(x, (emb.cos(), emb.sin()), mask)
    comp = compute(parse_scenario(text, "mla.toml"))
    # eager_attention_forward takes its softmax in float32 whatever the dtype: agreement to float32's 1e-7
    for h, hr in enumerate(comp.heads):
        np.testing.assert_allclose(hr.weights, weights[0, h].numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(comp.output, out[0].numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_absorbed_equals_expanded(seed: int) -> None:
    text, _ = random_mla(seed, d_cq=None if seed % 2 else 4, norms=seed % 3 != 0)
    comp = compute(parse_scenario(text, "mla.toml"))
    for hr in comp.heads:
        assert hr.part(MlaHead) is not None
        np.testing.assert_allclose(hr.part(MlaHead).absorbed_scores, hr.scores, rtol=0, atol=1e-12)
        np.testing.assert_allclose(hr.part(MlaHead).absorbed_output, hr.output, rtol=0, atol=1e-12)


def test_the_builtin_is_small_and_checks_by_hand() -> None:
    sc = load_scenario("mla")
    assert sc.mla is not None and (sc.mla.num_heads, sc.mla.d_c, sc.mla.d_nope, sc.mla.d_rope) == (2, 2, 2, 2)
    assert sc.tokens == ("I", "love", "AI")
    comp = compute(sc)
    assert comp.heads[0].part(MlaHead) is not None
    np.testing.assert_array_equal(comp.heads[0].part(MlaHead).shared.c_KV, [[1, 1], [1, 0], [1, 0]])  # as its description says
    assert sc.mla.cache_per_token() == (4, 8)
    hand = compute_hand(comp, 3)
    for h, exact in zip(hand.heads, comp.heads, strict=True):
        assert h.part(MlaHead) is not None
        np.testing.assert_allclose(h.output, exact.output, atol=5e-3)
        np.testing.assert_allclose(h.part(MlaHead).absorbed_output, exact.output, atol=5e-3)


def test_deepseek_v3_cache_line() -> None:
    """576 against 32,768: the latent (512) and the rotary key (64) against 128 heads' K and V of 128."""
    from qkv_tui.core.variants.mla import Mla

    z = np.zeros((1, 1))
    v3 = Mla(128, 128, 64, 128, np.zeros((1, 512)), z, z, z, z, None, None, False, np.ones(512), False, None, 1e-6)
    assert v3.cache_per_token() == (576, 32_768)


def test_json_mla_field_and_null_elsewhere() -> None:
    buf = io.StringIO()
    write_json(load_scenario("mla"), buf)
    doc = json.loads(buf.getvalue())
    assert list(doc)[-10:] == ["rope", "grad", "train", "mla", "linear", "deltanet",
                               "differential", "indexer", "ssd", "kv_source_layer"]
    mla = doc["mla"]
    assert list(mla) == ["c_KV_raw", "c_KV", "c_Q", "heads", "k_R"]
    assert list(mla["heads"][0]) == ["q_C", "q_R", "k_C", "v_C", "absorbed_scores"]
    assert mla["c_Q"] is None and len(mla["heads"]) == 2
    np.testing.assert_allclose(mla["heads"][1]["absorbed_scores"], doc["heads"][1]["scores"], atol=1e-12)
    plain = io.StringIO()
    write_json(load_scenario("i_love_ai"), plain)
    assert json.loads(plain.getvalue())["mla"] is None


@pytest.mark.parametrize("seed", [0, 1])
def test_toml_round_trip(seed: int) -> None:
    text, _ = random_mla(seed, d_cq=None if seed else 4)
    sc = parse_scenario(text, "mla.toml")
    back = parse_scenario(to_toml(sc), "back.toml")
    np.testing.assert_array_equal(compute(back).output, compute(sc).output)
    assert back.mla is not None and back.mla.rope is not None and back.rope is None


CASES = {
    "with_heads": (BASE + MLA + W_Q + '[[heads]]\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[1]]\n',
                   "[mla] and [[heads]] are both given; [mla] defines the heads itself"),
    "with_attention": (BASE + MLA + W_Q + '[attention]\nnum_heads = 1\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[1]]\n',
                       "[mla] and [attention] are both given"),
    "odd_rope": (BASE + MLA.replace("d_rope = 2", "d_rope = 3") + W_Q, "[mla] d_rope = 3; expected an even number"),
    "no_rope_dims": (BASE + MLA.replace("d_rope = 2", "d_rope = 0") + W_Q, "[mla] d_rope must be a whole number >= 2"),
    "missing_heads": (BASE + MLA.replace("num_heads = 2\n", "") + W_Q, "[mla] is missing 'num_heads'"),
    "dkv_rows": (BASE + MLA.replace("W_DKV = [[1, 0], [0, 0], [0, 1], [1, 0]]", "W_DKV = [[1, 0], [0, 0], [0, 1]]") + W_Q,
                 "[mla] W_DKV has 3 rows; expected d_model = 4 (the width of X)"),
    "uk_rows": (BASE + MLA.replace("W_UK = [[1, 0, 0, 1], [0, 1, 1, 0]]", "W_UK = [[1, 0, 0, 1]]") + W_Q,
                "[mla] W_UK has 1 rows; expected d_c, the columns of W_DKV = 2"),
    "uk_cols": (BASE + MLA.replace("W_UK = [[1, 0, 0, 1], [0, 1, 1, 0]]", "W_UK = [[1, 0, 0], [0, 1, 1]]") + W_Q,
                "[mla] W_UK has 3 columns; expected num_heads × d_nope = 2 × 2 = 4"),
    "uv_cols": (BASE + MLA.replace("W_UV = [[1, 0, 1, 1], [0, 1, 0, 1]]", "W_UV = [[1, 0], [0, 1]]") + W_Q,
                "[mla] W_UV has 2 columns; expected num_heads × d_v = 2 × 2 = 4"),
    "kr_cols": (BASE + MLA.replace("W_KR = [[0, 1], [1, 0], [0, 0], [0, 1]]", "W_KR = [[0], [1], [0], [0]]") + W_Q,
                "[mla] W_KR has 1 columns; expected d_rope = 2"),
    "q_cols": (BASE + MLA + "W_Q = [[1, 0], [0, 1], [1, 0], [0, 0]]\n",
               "[mla] W_Q has 2 columns; expected num_heads × (d_nope + d_rope) = 2 × 4 = 8"),
    "no_queries": (BASE + MLA, "[mla] is missing the queries: expected W_Q"),
    "both_queries": (BASE + MLA + W_Q + "W_DQ = [[1], [0], [0], [1]]\n", "[mla] gives both W_Q and W_DQ/W_UQ"),
    "dq_alone": (BASE + MLA + "W_DQ = [[1], [0], [0], [1]]\n", "[mla] W_DQ needs W_UQ beside it"),
    "uq_rows": (BASE + MLA + "W_DQ = [[1], [0], [0], [1]]\nW_UQ = [[1, 0, 0, 1, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0, 0, 0]]\n",
                "[mla] W_UQ has 2 rows; expected d_cq, the columns of W_DQ = 1"),
    "q_norm_without_dq": (BASE + MLA + W_Q + "q_norm = true\n", "[mla] q_norm = true needs W_DQ and W_UQ"),
    "gamma_kv_without_norm": (BASE + MLA + W_Q + "gamma_kv = [1, 1]\n", "[mla] gamma_kv needs kv_norm = true beside it"),
    "gamma_kv_length": (BASE + MLA + W_Q + "kv_norm = true\ngamma_kv = [1, 1, 1]\n",
                        "[mla] gamma_kv has 3 numbers; expected 2 (one gain per column of c_KV, d_c = 2)"),
    "kv_norm_not_bool": (BASE + MLA + W_Q + "kv_norm = 1\n", "[mla] kv_norm must be true or false, got a number (1)"),
    "eps_zero": (BASE + MLA + W_Q + "kv_norm = true\neps = 0\n", "[mla] eps = 0; expected a finite number > 0"),
    "unknown_key": (BASE + MLA + W_Q + "d_k = 2\n", "unknown key 'd_k' in [mla]"),
    "with_context": (BASE + MLA + W_Q + '[context]\ntokens = ["a"]\nX = [[1, 0, 1, 0]]\n',
                     "[mla] needs self-attention"),
    "with_qk_norm": (BASE + MLA + W_Q + '[qk_norm]\nover = "head"\n', "[mla] has its own latent norms"),
    "with_linear": (BASE + MLA + W_Q + '[linear]\nfeature = "elu1"\n', "[mla] and [linear] are both given"),
    "with_deltanet": (BASE + MLA + W_Q + "[deltanet]\ng = [[-0.5]]\nbeta = [[1]]\n", "[mla] and [deltanet] are both given"),
    "rope_partial": (random_mla(0)[0].replace('layout = "interleaved"', 'layout = "interleaved"\npartial = 0.5'),
                     "[rope] partial = 0.5 does not go with [mla]: latent attention already turns only part of each"),
    "w_o_rows": (BASE + MLA + W_Q + "[output]\nW_O = [[1], [1]]\n", "[output] W_O has 2 rows; expected 4"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_errors_are_one_line(case: str) -> None:
    text, expected = CASES[case]
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, "m.toml")
    message = str(info.value)
    assert "\n" not in message
    assert expected in message, message


def test_valid_forms_load() -> None:
    for text in (BASE + MLA + W_Q, BASE + MLA + W_Q + ROPE, BASE + MLA + W_Q + "kv_norm = true\neps = 1e-5\n",
                 BASE + MLA + "W_DQ = [[1], [0], [0], [1]]\nW_UQ = [[1, 0, 0, 1, 0, 1, 1, 0]]\nq_norm = true\n"):
        sc = parse_scenario(text, "m.toml")
        assert sc.mla is not None and len(sc.heads) == 2 and sc.heads[0].d_k == 4
        compute(sc)


def _evaluate(expr: str) -> float:
    text = re.sub(r"√(\d+(?:\.\d+)?)", r"sqrt(\1)", expr.replace("·", "*").replace("−", "-")).replace("√", "sqrt")
    return float(eval(text, {"__builtins__": {}}, {"sqrt": math.sqrt}))


@pytest.mark.parametrize(("name", "decimals"), [("mla", 3), ("mla", 1), ("mla", 4), ("norms", 3), ("norms", 2)])
def test_worksheet_answer_key_recomputes(name: str, decimals: int) -> None:
    """Every blank has its line, and each line's numbers give its answer within one unit of the last digit."""
    from qkv_tui.edges.worksheet.make import build

    text = random_mla(4, n=3, d_model=4, H=2, d_c=2, d_nope=1, d_rope=2, d_v=2)[0] if name == "norms" else None
    comp = compute(load_scenario("mla") if text is None else parse_scenario(text, "m.toml"))
    page = build(comp, "100%", 0, decimals).markdown()
    blanks = {int(n) for n in re.findall(r"\((\d+)\) _+", page)}
    key = {int(m.group(1)): m.group(2) for m in re.finditer(r"^- \((\d+)\) (.*)$", page, re.M)}
    assert blanks and blanks == set(key)
    for line in key.values():
        steps = line.split(" = ")
        answer = steps[-1]
        unit = 10.0 ** -len(answer.split(".")[1]) if "." in answer else 1.0
        numeric = [s for s in steps[1:-1] if not re.search(r"[A-Za-z_]", re.sub(r"\d[eE][+-]?\d+", "0", s))]
        assert numeric, line
        for step in numeric:
            assert abs(_evaluate(step) - float(answer)) <= unit + 1e-9, line
