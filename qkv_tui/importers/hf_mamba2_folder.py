"""Hugging Face "mamba2" folders (transformers' Mamba2ForCausalLM), each layer opened as an ``[ssd]`` scenario.

A Mamba-2 block is RMSNorm → mixer → residual add (``Mamba2Block``), with no MLP and no position embeddings: the
order of the tokens enters through the convolution and the recurrence. So the scenario of layer i is:
- X, the residual stream entering the block: the token embeddings (``backbone.embeddings.weight``; older
  checkpoints spell it ``embedding.weight``, which transformers' load hook renames), then every earlier block run
  in NumPy with kernels/ssd.py's mixer (float64; transformers keeps the residual in float32);
- ``[norm]``, the block's RMSNorm (``layers.i.norm.weight``, layer_norm_epsilon);
- ``[ssd]``, the mixer on the normed X̂ (importers/hf_mamba2.py): z, x, B and C as numbers, dt's columns of in_proj
  with dt_bias, A = −e^A_log, D, the grouped gated norm's γ; one scenario head per SSD head (its W_Q, W_K and
  W_V are zeros the part does not read: W_V's head_dim columns say how wide its y is), out_proj as W_O.
Every head or none: the gated RMSNorm of y·SiLU(z) runs over each group's heads together, so ``model.heads`` is
one line.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.hf_config import Config
from qkv_tui.importers.hf_mamba2 import mixer_table, mixer_weights
from qkv_tui.importers.hf_tensors import lookup
from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.stack import Array, Attention, Layer, Model, Norm, Tokenize
from qkv_tui.kernels.ssd import MixerWeights, mixer

EMBEDDINGS = ("embeddings.weight", "embedding.weight")  # transformers' name, and the one its load hook renames


class _Named(Mapping[str, Array]):
    """The folder's tensors as the mapping hf_mamba2.mixer_weights reads (each widened when asked for; the shapes
    are checked there)."""

    def __init__(self, tensors: TensorFiles) -> None:
        self.tensors = tensors

    def __getitem__(self, name: str) -> Array:
        if name not in self.tensors:
            raise KeyError(name)
        return self.tensors.get(name, (None,) * len(self.tensors.entries[name].shape))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors.names())

    def __len__(self) -> int:
        return len(self.tensors.entries)


def _prefix(tensors: TensorFiles) -> tuple[str, str]:
    """The key prefix in front of the blocks ("backbone.") and the embedding table's full name."""
    for name in tensors.names():
        for suffix in EMBEDDINGS:
            if name == suffix or name.endswith("." + suffix):
                return name[: len(name) - len(suffix)], name
    raise ImporterError("the checkpoint has no 'embeddings.weight' tensor; expected a mamba2 (Mamba2ForCausalLM)"
                        " checkpoint's key names, such as backbone.embeddings.weight")


def _ssd_data(X_hat: Array, w: MixerWeights) -> dict[str, Any]:
    """The [ssd] table as scenario data: the layer's mixer on its normed input."""
    return {"ssd": mixer_table(X_hat, w)}


def every_head(name: str) -> ImporterError:
    return ImporterError(
        f"{_show(name)}: a Mamba-2 layer's heads are normed together (the gated RMSNorm of y·SiLU(z) runs over each group's"
        " heads), so the scenario needs every head; leave out model.heads"
    )


def note(config: Config) -> str:
    raw = config.raw
    H, P, G, N = config.num_heads, config.head_dim, raw["n_groups"], raw["state_size"]
    return (f"Mamba-2: RMSNorm, then the mixer, added to the stream (no MLP, no positions). Its {H} heads are SSD"
            f" heads of head_dim {P} in {G} group{'s' * (G != 1)} sharing B and C (d_state {N}); z, x, B and C are the"
            f" mixer's own (in_proj on X̂, then a causal convolution of {raw['conv_kernel']} taps and SiLU for x, B, C),"
            " and each head's W_Q, W_K and W_V are zeros the [ssd] part does not read.")


def open_mamba2(config: Config, tensors: TensorFiles, tokenize: Tokenize, source: str) -> Model:
    p, embeddings = _prefix(tensors)
    d, H, P = config.d_model, config.num_heads, config.head_dim
    table = tensors.rows(embeddings, (None, d))  # (vocab, d), rows read as a text needs them
    named = _Named(tensors)
    said = note(config)

    def embed(ids: list[int]) -> Array:
        return lookup(table, embeddings, ids)  # (n, d_model): no position embeddings

    def nothing(x: Array) -> Array:  # the block has no MLP: the stream passes it unchanged
        return np.zeros_like(x)

    def layer(i: int) -> Layer:
        h = f"{p}layers.{i}."
        w = mixer_weights(config.raw, named, h + "mixer.")
        norm = Norm("rms", tensors.get(h + "norm.weight", (d,)), None, config.eps)
        unread = Attention(np.zeros((d, H)), np.zeros((d, H)), np.zeros((d, H * P)), w.W_out, None, None, None, w.b_out,
                           H, H)

        def tables_on(X_hat: Array, heads: list[int]) -> dict[str, Any]:
            if heads != list(range(H)):
                raise every_head(source)
            return _ssd_data(X_hat, w)

        return Layer(norm=norm, attention=unread, mlp_norm=norm, mlp=nothing, scale=None, window=None, rotary=False,
                     attend=lambda x, rope: mixer(x, w).output, tables_on=tables_on)

    return Model(source, config.num_layers, H, config.context, None, tokenize, embed, layer,
                 ("linear",) * config.num_layers, lambda i: said, positionless=True)
