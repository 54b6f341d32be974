"""A tiny Mamba-2 mixer built with transformers' own classes, read by importers/hf_mamba2.py into an [ssd]
scenario, against transformers' eager forward (``Mamba2Mixer.forward`` in eval without a cache: transformers 5's
mixer has no separate torch_forward, its causal_conv1d and chunk-scan functions fall back to torch without the CUDA
kernels):
the scenario's output (the heads' gated, normalised y through W_O = out_proj) equals the mixer's. transformers'
scan and gated norm run in float32 (tests/test_ssd_kernel.py), so they agree to float32 noise."""

from __future__ import annotations

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.toml_text import string, vector
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.hf_mamba2 import DESCRIPTION, mixer_table, mixer_weights

from .test_calculator import assert_holds, check_text

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

F32 = {"rtol": 1e-5, "atol": 1e-6}


def _mixer(use_bias: bool, limit: tuple[float, float]) -> tuple[object, dict[str, object]]:
    from transformers import Mamba2Config
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

    cfg = Mamba2Config(num_heads=4, head_dim=2, hidden_size=4, expand=2, state_size=3, n_groups=2, conv_kernel=3,
                       chunk_size=2, num_hidden_layers=1, vocab_size=10, use_bias=use_bias, layer_norm_epsilon=1e-5,
                       time_step_limit=limit)
    torch.manual_seed(int(use_bias))
    m = Mamba2Mixer(cfg, 0).double().eval()
    with torch.no_grad():
        for param in (m.in_proj.weight, m.conv1d.weight, m.conv1d.bias, m.out_proj.weight, m.dt_bias, m.D):
            param.normal_(0.0, 0.5)
        m.norm.weight.uniform_(0.5, 1.5)
        if use_bias:
            m.in_proj.bias.normal_()
            m.out_proj.bias.normal_()
    return m, cfg.to_dict()


def _matrix(m: np.ndarray) -> str:
    return "[\n" + "".join(f"  {vector(row)},\n" for row in m) + "]"


def _value(v: object) -> str:
    if isinstance(v, np.ndarray):
        return _matrix(v) if v.ndim == 2 else vector(v)
    if isinstance(v, list):
        return vector(np.array(v, dtype=float))
    return repr(v)


def ssd_scenario(X: np.ndarray, w, tokens: list[str], title: str) -> str:
    """A scenario file of the mixer on its input X, its [ssd] table the importer's data written as TOML."""
    d_model = X.shape[1]
    lines = [f"title = {string(title)}", f"description = {string(DESCRIPTION)}",
             f"tokens = [{', '.join(string(t) for t in tokens)}]", f"X = {_matrix(X)}", 'mask = "causal"']
    zeros = np.zeros((d_model, 1))
    for h in range(w.num_heads):  # the heads' weights are not read under [ssd]: W_V's width is each head's d
        lines += ["[[heads]]", f"name = {string(f'ssd head {h + 1}')}", f"W_Q = {_matrix(zeros)}",
                  f"W_K = {_matrix(zeros)}", f"W_V = {_matrix(np.zeros((d_model, w.head_dim)))}"]
    lines += ["[output]", f"W_O = {_matrix(w.W_out)}"]
    if w.b_out is not None:
        lines.append(f"b_O = {vector(w.b_out)}")
    lines.append("[ssd]")
    lines += [f"{key} = {_value(value)}" for key, value in mixer_table(X, w).items() if value is not None]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("use_bias", "limit"), [(False, (0.0, float("inf"))), (True, (0.05, 2.0))])
def test_the_scenario_of_a_layer_matches_transformers_eager(use_bias: bool, limit: tuple[float, float]) -> None:
    m, config = _mixer(use_bias, limit)
    tensors = {k: v.detach().numpy() for k, v in m.state_dict().items()}  # type: ignore[attr-defined]
    n = 5
    X = np.random.default_rng(3).normal(size=(n, 4))
    with torch.no_grad():
        theirs = m(torch.tensor(X)[None])[0].numpy()  # type: ignore[operator]
    text = ssd_scenario(X, mixer_weights(config, tensors, ""), [f"t{i}" for i in range(n)], "tiny mamba2")
    comp = compute(parse_scenario(text, "mamba2.toml"))
    np.testing.assert_allclose(comp.output, theirs, **F32)
    assert len(comp.heads) == 4 and all(hr.output.shape == (n, 2) for hr in comp.heads)
    assert_holds(check_text(to_markdown(comp, 3)))  # every line of the layer's page on the calculator


def test_a_missing_or_misshapen_tensor_is_one_line() -> None:
    m, config = _mixer(False, (0.0, float("inf")))
    tensors = {k: v.detach().numpy() for k, v in m.state_dict().items()}  # type: ignore[attr-defined]
    with pytest.raises(ImporterError, match="the checkpoint has no A_log"):
        mixer_weights(config, {k: v for k, v in tensors.items() if k != "A_log"}, "")
    with pytest.raises(ImporterError, match=r"D has shape \(3,\); expected \(4,\)"):
        mixer_weights(config, {**tensors, "D": np.ones(3)}, "")
