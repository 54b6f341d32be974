"""Mamba-2's state-space duality (qkv_tui/kernels/ssd.py) against transformers' Mamba-2 code, and the two forms' agreement.

transformers' torch path of the SSD, ``mamba2_chunk_scan`` (the one ``Mamba2Mixer.forward`` runs without the
CUDA kernels), casts x, B and C to float32 (``hidden_states.float()``) and computes A = −e^(A_log) in float32;
its one-token step ``mamba2_selective_state_update`` takes e^(dt·A) in float32 too, and ``MambaRMSNormGated``
normalises in float32. So everything compared with transformers here agrees to float32 noise (1e-5 relative),
said at each check; the recurrence and the attention form agree with each other to float64 noise.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui.kernels.policy import ByHand
from qkv_tui.kernels.ssd import MixerWeights, decay_mask, mixer, softplus, ssd, ssd_head, steps

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

F32 = {"rtol": 1e-5, "atol": 1e-6}  # transformers' float32 SSD (see the module's docstring)


def _inputs(seed: int, n: int, H: int, d: int, G: int, N: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=(n, H * d)), "dt_raw": rng.normal(size=(n, H)), "dt_bias": rng.normal(size=H),
            "A": -rng.uniform(0.2, 2.0, size=H), "B": rng.normal(size=(n, G * N)), "C": rng.normal(size=(n, G * N)),
            "D": rng.normal(size=H)}


@pytest.mark.parametrize(("n", "chunk"), [(7, 3), (5, 8), (6, 2)])
def test_ssd_matches_transformers_chunk_scan(n: int, chunk: int) -> None:
    from transformers.models.mamba2.modeling_mamba2 import mamba2_chunk_scan

    H, d, G, N = 4, 3, 2, 5
    p = _inputs(n + chunk, n, H, d, G, N)
    t = {k: torch.tensor(v) for k, v in p.items()}
    theirs = mamba2_chunk_scan(t["x"].view(1, n, H, d), t["dt_raw"][None], t["A"], t["B"].view(1, n, G, N),
                               t["C"].view(1, n, G, N), chunk_size=chunk, D=t["D"], dt_bias=t["dt_bias"],
                               dt_softplus=True).reshape(n, H * d).double().numpy()
    dt = steps(p["dt_raw"], p["dt_bias"])
    ours = ssd(p["x"], dt, p["A"], p["B"], p["C"], p["D"], G)
    np.testing.assert_allclose(ours.y, theirs, **F32)  # float32 noise: transformers' scan runs in float32
    np.testing.assert_allclose(np.concatenate([h.y_recurrent for h in ours.heads], axis=1), theirs, **F32)


def test_every_state_cell_matches_transformers_one_token_step() -> None:
    """transformers' recurrent step, token by token, against every h_t cell the kernel keeps."""
    from transformers.models.mamba2.modeling_mamba2 import mamba2_selective_state_update

    n, H, d, G, N = 6, 4, 3, 2, 5
    p = _inputs(11, n, H, d, G, N)
    ours = ssd(p["x"], steps(p["dt_raw"], p["dt_bias"]), p["A"], p["B"], p["C"], p["D"], G)
    state = torch.zeros(1, H, d, N, dtype=torch.float64)
    for s in range(n):
        out = mamba2_selective_state_update(
            state, torch.tensor(p["x"][s]).view(1, H, d), torch.tensor(p["dt_raw"][s])[None, :, None].expand(1, H, d),
            torch.tensor(p["A"])[:, None, None].expand(H, d, N), torch.tensor(p["B"][s]).view(1, G, N),
            torch.tensor(p["C"][s]).view(1, G, N), torch.tensor(p["D"])[:, None].expand(H, d),
            dt_bias=torch.tensor(p["dt_bias"])[:, None].expand(H, d), dt_softplus=True)
        for h, head in enumerate(ours.heads):
            np.testing.assert_allclose(head.states[s], state[0, h].numpy(), **F32)  # float32: its e^(dt·A)
            np.testing.assert_allclose(head.y_recurrent[s], out[0, h].numpy(), **F32)


@pytest.mark.parametrize("seed", [0, 1])
def test_whole_mixer_matches_transformers_mamba2_mixer(seed: int) -> None:
    """in_proj, the causal convolution and SiLU, the SSD, the z-gate with the grouped RMSNorm and out_proj."""
    from transformers import Mamba2Config
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

    cfg = Mamba2Config(num_heads=4, head_dim=3, hidden_size=6, expand=2, state_size=5, n_groups=2, conv_kernel=3,
                       chunk_size=4, num_hidden_layers=1, vocab_size=10, use_bias=seed == 1, layer_norm_epsilon=1e-5)
    torch.manual_seed(seed)
    m = Mamba2Mixer(cfg, 0).double().eval()
    with torch.no_grad():
        for param in (m.in_proj.weight, m.conv1d.weight, m.conv1d.bias, m.out_proj.weight, m.dt_bias, m.D):
            param.normal_(0.0, 0.5)
        m.norm.weight.uniform_(0.5, 1.5)
        if seed == 1:
            m.in_proj.bias.normal_()
            m.out_proj.bias.normal_()
    n = 7
    X = np.random.default_rng(seed).normal(size=(n, 6))
    with torch.no_grad():
        theirs = m(torch.tensor(X)[None])[0].numpy()
    w = MixerWeights(4, 3, 2, 5, m.in_proj.weight.detach().numpy().T, m.conv1d.weight.detach().numpy()[:, 0, :],
                     m.conv1d.bias.detach().numpy(), m.dt_bias.detach().numpy(),
                     -np.exp(m.A_log.detach().numpy()), m.D.detach().numpy(), m.norm.weight.detach().numpy(), 1e-5,
                     m.out_proj.weight.detach().numpy().T,
                     None if m.in_proj.bias is None else m.in_proj.bias.detach().numpy(),
                     None if m.out_proj.bias is None else m.out_proj.bias.detach().numpy(), cfg.time_step_limit)
    ours = mixer(X, w)
    np.testing.assert_allclose(ours.output, theirs, **F32)  # float32: the scan and the gated norm


def test_softplus_follows_torch_threshold() -> None:
    x = np.array([-30.0, -1.0, 0.0, 3.0, 19.5, 20.0, 20.5, 1e300])
    np.testing.assert_array_equal(softplus(x)[-2:], x[-2:])  # above 20 the input itself, as torch
    np.testing.assert_allclose(softplus(x), torch.nn.functional.softplus(torch.tensor(x)).numpy(), rtol=1e-15)


def test_decay_mask_is_the_product_of_the_decays_between() -> None:
    a = np.array([0.5, 0.25, 0.8, 0.1])
    L = decay_mask(a)
    assert np.array_equal(np.diag(L), np.ones(4)) and not np.triu(L, 1).any()
    assert L[3, 0] == pytest.approx(0.25 * 0.8 * 0.1, rel=1e-15) and L[2, 1] == 0.8


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 8), d=st.integers(1, 4), N=st.integers(1, 4), seed=st.integers(0, 2**16),
       scale=st.sampled_from([0.01, 1.0, 5.0]))
def test_recurrence_equals_attention_form(n: int, d: int, N: int, seed: int, scale: float) -> None:
    rng = np.random.default_rng(seed)
    dt = softplus(rng.normal(size=n) * scale)
    head = ssd_head(rng.normal(size=(n, d)), dt, -rng.uniform(0.01, 3.0), rng.normal(size=(n, N)),
                    rng.normal(size=(n, N)), rng.normal())
    assert head.states.shape == (n, d, N) and head.L.shape == (n, n)
    size = max(1.0, float(np.abs(head.y_recurrent).max()))
    assert head.gap <= 1e-12 * size * n
    np.testing.assert_allclose(head.a, np.exp(dt * head.A), rtol=1e-15)
    # y_t = C_t·h_t + D·x_t, from the kept states
    np.testing.assert_allclose(head.y_recurrent, np.einsum("tdn,tn->td", head.states, head.C) + head.D * head.x,
                               rtol=1e-12, atol=1e-12)


def test_by_hand_both_forms_write_rounded_numbers() -> None:
    rng = np.random.default_rng(2)
    dt = steps(rng.normal(size=(4, 1)), np.zeros(1), policy=ByHand(3))[:, 0]
    head = ssd_head(rng.normal(size=(4, 2)), dt, -0.7, rng.normal(size=(4, 2)), rng.normal(size=(4, 2)), 0.5,
                    policy=ByHand(3))
    for table in (dt, head.a, head.L, head.G, head.M, head.y_attention, head.y_recurrent, head.states):
        assert np.array_equal(table, np.round(table, 3))
    assert head.gap < 0.02  # the two forms round differently, so by hand they drift apart a little


def _weights_of(m, heads: int, head_dim: int, groups: int, d_state: int, eps: float) -> MixerWeights:  # type: ignore[no-untyped-def]
    def a(t):  # type: ignore[no-untyped-def]
        return None if t is None else t.detach().numpy()

    return MixerWeights(heads, head_dim, groups, d_state, a(m.in_proj.weight).T, a(m.conv1d.weight)[:, 0, :],
                        a(m.conv1d.bias), a(m.dt_bias), -np.exp(a(m.A_log)), a(m.D), a(m.norm.weight), eps,
                        a(m.out_proj.weight).T, a(m.in_proj.bias), a(m.out_proj.bias), tuple(m.time_step_limit))


def test_hybrid_mamba2_layer_matches_transformers_nemotron_h() -> None:
    """A Mamba-2 layer of a hybrid (Nemotron-H), whose steps are clamped below at time_step_min (here 0.7, so the
    clamp bites): the same kernel, the clamp from the layer's time_step_limit. float32 noise as above."""
    from transformers import NemotronHConfig
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMamba2Mixer

    cfg = NemotronHConfig(hidden_size=6, mamba_num_heads=4, mamba_head_dim=3, ssm_state_size=5, n_groups=2,
                          conv_kernel=3, chunk_size=4, num_hidden_layers=1, vocab_size=10, time_step_min=0.7,
                          num_attention_heads=2, num_key_value_heads=1, intermediate_size=8)
    torch.manual_seed(3)
    m = NemotronHMamba2Mixer(cfg, 0).double().eval()
    with torch.no_grad():
        for param in (m.in_proj.weight, m.conv1d.weight, m.conv1d.bias, m.out_proj.weight, m.dt_bias, m.D):
            param.normal_(0.0, 0.5)
        m.norm.weight.uniform_(0.5, 1.5)
    X = np.random.default_rng(3).normal(size=(7, 6))
    with torch.no_grad():
        theirs = m(torch.tensor(X)[None])[0].numpy()
    w = _weights_of(m, 4, 3, 2, 5, cfg.layer_norm_epsilon)
    assert w.dt_limit == (0.7, float("inf"))
    ours = mixer(X, w)
    assert (ours.dt == 0.7).any()  # some steps were clamped
    np.testing.assert_allclose(ours.output, theirs, **F32)  # float32: the scan and the gated norm
    unclamped = mixer(X, MixerWeights(**{**w.__dict__, "dt_limit": (0.0, float("inf"))}))
    assert np.abs(unclamped.output - theirs).max() > 1e-3  # without the clamp it would not agree


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_decay_mask_is_transformers_exp_of_segment_sum(n: int, seed: int) -> None:
    """L against transformers' own e^(segment_sum(dt·A)) (mamba2's causal decay mask; pure torch, so float64 here)."""
    from transformers.models.mamba2.modeling_mamba2 import segment_sum

    rng = np.random.default_rng(seed)
    logs = -rng.uniform(0.0, 2.0, size=n)  # dt·A
    theirs = torch.exp(segment_sum(torch.tensor(logs))).numpy()
    np.testing.assert_allclose(decay_mask(np.exp(logs)), theirs, rtol=1e-13, atol=0)
