"""A scenario written from a tiny MiMo-V2-Flash attention layer, built with transformers' own classes, gives the
layer's eager output: values scaled by attention_value_scale after the projection, and query/key heads wider than
the value heads (head_dim 4, v_head_dim 2) outside [mla], with the model's partial RoPE and grouped K/V heads.

The rotary frequencies are float32 in transformers (inv_freq), so the comparison holds to float32's digits."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers.models.mimo_v2_flash")

from transformers.models.mimo_v2_flash.configuration_mimo_v2_flash import MiMoV2FlashConfig  # noqa: E402
from transformers.models.mimo_v2_flash.modeling_mimo_v2_flash import (  # noqa: E402
    MiMoV2FlashAttention,
    MiMoV2FlashRotaryEmbedding,
)

from qkv_tui import compute  # noqa: E402
from qkv_tui.core.scenario import parse_scenario  # noqa: E402
from qkv_tui.core.toml_text import vector  # noqa: E402


def rows(M: np.ndarray) -> str:
    return "[" + ", ".join(vector(r) for r in M) + "]"


def layer(value_scale: float | None, seed: int) -> tuple[MiMoV2FlashAttention, MiMoV2FlashRotaryEmbedding]:
    config = MiMoV2FlashConfig(
        hidden_size=4, num_attention_heads=2, num_key_value_heads=1, head_dim=4, v_head_dim=2, num_hidden_layers=1,
        attention_value_scale=value_scale, attention_bias=False,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10_000.0,
                                            "partial_rotary_factor": 0.5}},
    )
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    attn = MiMoV2FlashAttention(config, 0).double().eval()
    for p in attn.parameters():
        torch.nn.init.normal_(p, std=0.7)
    return attn, MiMoV2FlashRotaryEmbedding(config)


def scenario(attn: MiMoV2FlashAttention, X: np.ndarray, value_scale: float | None) -> str:
    w = {name: getattr(attn, name).weight.detach().numpy().T for name in ("q_proj", "k_proj", "v_proj", "o_proj")}
    text = f"""
tokens = ["a", "b", "c"]
X = {rows(X)}
mask = "causal"

[attention]
num_heads = 2
num_kv_heads = 1
W_Q = {rows(w["q_proj"])}
W_K = {rows(w["k_proj"])}
W_V = {rows(w["v_proj"])}

[output]
W_O = {rows(w["o_proj"])}

[rope]
layout = "half"
partial = 0.5
"""
    return text if value_scale is None else text + f"\n[value_scale]\nfactor = {value_scale}\n"


@pytest.mark.parametrize("value_scale", [0.707, 1.9, None])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_layer_matches_transformers(value_scale: float | None, seed: int) -> None:
    attn, rotary = layer(value_scale, seed)
    X = np.random.default_rng(seed).normal(size=(3, 4))
    x = torch.tensor(X)[None]
    position_ids = torch.arange(3)[None]
    cos, sin = rotary(x, position_ids, "full_attention")
    mask = torch.full((3, 3), -torch.inf, dtype=torch.float64).triu(1)[None, None]
    with torch.no_grad():
        expected, _ = attn(x, (cos.double(), sin.double()), attention_mask=mask)
    comp = compute(parse_scenario(scenario(attn, X, value_scale), "mimo.toml"))
    assert [(h.d_k, h.d_v) for h in comp.heads] == [(4, 2), (4, 2)]
    np.testing.assert_allclose(comp.output, expected[0].numpy(), rtol=1e-5, atol=1e-6)
    # the V the app shows is the model's value_states: v_proj(x)·attention_value_scale
    with torch.no_grad():
        v = attn.v_proj(x)[0].numpy() * (1.0 if value_scale is None else value_scale)
    np.testing.assert_allclose(comp.heads[0].V, v, rtol=1e-12, atol=1e-12)
