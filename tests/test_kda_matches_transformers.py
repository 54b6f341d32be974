"""Kimi Delta Attention (qkv_tui/kernels/kda.py) against transformers' own Kimi Linear code: the rule against
``recurrent_kimi_delta_attention`` and ``chunk_kimi_delta_attention``, the channel gates against
``KimiLinearForgetGate``, and a whole layer against ``KimiLinearDeltaAttention``'s forward on a tiny config
built with its classes in float64.

Tolerances are float32 noise: transformers casts q, k, v, g and β to float32 inside both rule functions, the
forget gate's output to float32 (``forget_gate.float()``), and its gated output norm to float32 too; only
the projections and the short convolution run in the layer's float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
m = pytest.importorskip("transformers.models.kimi_linear.modeling_kimi_linear")
from transformers.models.kimi_linear.configuration_kimi_linear import KimiLinearConfig  # noqa: E402

from qkv_tui.kernels.kda import KdaLayerWeights, channel_gates, kda_forward, kda_layer  # noqa: E402

F32: dict[str, Any] = dict(rtol=2e-5, atol=2e-5)  # float32 noise, where transformers computes in float32 (module docstring)


def _tiny(heads: int, d: int, taps: int, seed: int) -> tuple[Any, Any]:
    cfg = KimiLinearConfig(hidden_size=8, linear_num_heads=heads, linear_head_dim=d, linear_conv_kernel_dim=taps,
                           num_hidden_layers=1, layer_types=["linear_attention"], mlp_layer_types=["dense"],
                           vocab_size=16, intermediate_size=8, pad_token_id=None, bos_token_id=None,
                           eos_token_id=None)
    layer = m.KimiLinearDeltaAttention(cfg, 0).double()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():  # A_log and dt_bias start as torch.empty: every weight is set here
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.6)
    return cfg, layer


def _weights(cfg: Any, layer: Any) -> KdaLayerWeights:
    H, d = cfg.linear_num_heads, cfg.linear_head_dim
    taps = layer.conv1d.weight.detach().numpy()[:, 0, :].T  # (K, 3·H·d), the current token's tap last
    def t(lin: Any) -> Any:
        return lin.weight.detach().numpy().T  # nn.Linear keeps W as (out, in)

    return KdaLayerWeights(
        num_heads=H, d_k=d, W_Q=t(layer.q_proj), W_K=t(layer.k_proj), W_V=t(layer.v_proj),
        conv_q=taps[:, :H * d], conv_k=taps[:, H * d:2 * H * d], conv_v=taps[:, 2 * H * d:],
        W_fa=t(layer.forget_gate.f_a_proj), W_fb=t(layer.forget_gate.f_b_proj),
        A_log=layer.forget_gate.A_log.detach().numpy().reshape(H), dt_bias=layer.forget_gate.dt_bias.detach().numpy(),
        W_b=t(layer.b_proj), W_ga=t(layer.g_a_proj), W_gb=t(layer.g_b_proj),
        gamma_o=layer.o_norm.weight.detach().numpy(), eps=cfg.rms_norm_eps, W_O=t(layer.o_proj))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("chunked", [False, True])
def test_rule_matches_transformers_reference(seed: int, chunked: bool) -> None:
    rng = np.random.default_rng(seed)
    n, H, d_k, d_v = 6, 2, 3, 4
    q, k = rng.normal(size=(n, H, d_k)), rng.normal(size=(n, H, d_k))
    v = rng.normal(size=(n, H, d_v))
    g = -rng.uniform(0.0, 2.0, size=(n, H, d_k))  # channels decay at different rates
    beta = rng.uniform(0.0, 1.0, size=(n, H))
    args = [torch.from_numpy(a)[None] for a in (q, k, v, g, beta)]
    fn = m.chunk_kimi_delta_attention if chunked else m.recurrent_kimi_delta_attention
    out, state = fn(*args[:3], g=args[3], beta=args[4], initial_state=None, output_final_state=True,
                    use_qk_l2norm_in_kernel=True)
    for h in range(H):
        ours = kda_forward(q[:, h], k[:, h], v[:, h], g[:, h], beta[:, h])
        assert not ours.uniform
        np.testing.assert_allclose(ours.output, out[0, :, h].double().numpy(), **F32)
        np.testing.assert_allclose(ours.S[-1], state[0, h].double().numpy(), **F32)  # (d_k, d_v): the same layout


def test_gates_match_forget_gate() -> None:
    cfg, layer = _tiny(2, 3, 3, seed=7)
    w = _weights(cfg, layer)
    x = torch.randn(1, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    gates = channel_gates(x[0].numpy(), w.W_fa, w.W_fb, w.A_log, w.dt_bias, w.W_b)
    with torch.no_grad():
        g_ref = layer.forget_gate(x)[0].double().numpy()  # (n, H, d_k)
        beta_ref = torch.sigmoid(layer.b_proj(x))[0].numpy()
    np.testing.assert_allclose(gates.g, g_ref, **F32)
    np.testing.assert_allclose(gates.beta, beta_ref, rtol=1e-12, atol=1e-14)  # float64 on both sides
    assert (np.ptp(gates.g, axis=2) > 0).any()  # the test would not notice a gate shared by the channels otherwise


@pytest.mark.parametrize("shape", [(2, 3, 3, 0), (1, 4, 4, 1), (3, 2, 2, 2)])
def test_layer_matches_kimi_linear_delta_attention(shape: tuple[int, int, int, int]) -> None:
    heads, d, taps, seed = shape
    cfg, layer = _tiny(heads, d, taps, seed)
    x = torch.randn(1, 7, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(100 + seed))
    seen: dict[str, Any] = {}
    layer.o_norm.register_forward_hook(lambda mod, inp, out: seen.update(o=inp[0], z=inp[1], out=out))
    with torch.no_grad():
        y = layer(x)[0].numpy()
    ours = kda_layer(_weights(cfg, layer), x[0].numpy())
    for h in range(heads):
        # the rule's output, before the gated norm: transformers' core_attn_out
        np.testing.assert_allclose(ours.heads[h].output, seen["o"][0, :, h].numpy(), **F32)
        # the gate's input is float64 on both sides (two float64 projections)
        np.testing.assert_allclose(ours.norms[h].z, seen["z"][0, :, h].numpy(), rtol=1e-12, atol=1e-14)
        # after rmsnorm(o)·γ·σ(z)
        np.testing.assert_allclose(ours.norms[h].out, seen["out"][0, :, h].numpy(), **F32)
    np.testing.assert_allclose(ours.output, y, **F32)  # after o_proj
