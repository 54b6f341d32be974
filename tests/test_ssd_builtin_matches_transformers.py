"""The built-in ssd's heads, as the part wires them (each scenario head its share of x, every head reading its
group's B and C, the gated norm over the group's columns across heads), against transformers' own Mamba-2
functions on the same numbers: ``mamba2_chunk_scan`` (softplus of dt_raw + dt_bias inside) and
``MambaRMSNormGated``. Both run in float32 (see tests/test_ssd_kernel.py), so they agree to float32 noise."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from qkv_tui import compute, load_scenario

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

BUILTIN = Path(__file__).resolve().parents[1] / "scenarios" / "ssd.toml"
F32 = {"rtol": 1e-5, "atol": 1e-6}  # transformers' float32 scan and norm


def test_heads_and_gated_norm_match_transformers() -> None:
    from transformers.models.mamba2.modeling_mamba2 import MambaRMSNormGated, mamba2_chunk_scan

    doc = tomllib.loads(BUILTIN.read_text(encoding="utf-8"))
    s = doc["ssd"]
    X = np.array(doc["X"], dtype=float)
    n, H, G = X.shape[0], s["num_heads"], s["num_groups"]
    d = X.shape[1] // H
    B, C, z = (torch.tensor(np.array(s[k], dtype=float)) for k in ("B", "C", "z"))
    N = B.shape[1] // G
    dt_raw = torch.tensor(X @ np.array(s["W_dt"], dtype=float))
    y = mamba2_chunk_scan(torch.tensor(X).view(1, n, H, d), dt_raw[None], torch.tensor(s["A"], dtype=torch.float64),
                          B.view(1, n, G, N), C.view(1, n, G, N), chunk_size=2,
                          D=torch.tensor(s["D"], dtype=torch.float64), dt_bias=torch.tensor(s["dt_bias"],
                                                                                               dtype=torch.float64),
                          dt_softplus=True).reshape(n, H * d).double()
    norm = MambaRMSNormGated(H * d, group_size=H * d // G, eps=1e-5).double()
    theirs = norm(y, z).detach().numpy()
    comp = compute(load_scenario(BUILTIN))
    ours = np.concatenate([h.output for h in comp.heads], axis=1)
    np.testing.assert_allclose(ours, theirs, **F32)
    np.testing.assert_allclose(comp.output, theirs, **F32)  # no W_O: the layer's output is the heads side by side
