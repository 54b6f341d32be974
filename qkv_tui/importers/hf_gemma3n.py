"""Gemma 3n's text decoder (model_type "gemma3n", "gemma3n_text"), run in NumPy as transformers'
Gemma3nTextModel computes it, so that a deep layer's attention reads what the model's does.

What the stream is, layer by layer (modeling_gemma3n.py, transformers 5.24):

- **AltUp** (Baykal et al. 2023): the stream is altup_num_inputs copies of d_model. The first is the token
  embeddings × √d_model; each other is the embeddings through ``altup_projections[i]``, rescaled to the first's
  root mean square. Before a layer, ``altup.predict`` mixes the copies with coefficients a router computes from
  the active copy (tanh of ``modality_router`` over its RMS-normed, ÷ d_model form); the layer runs on the
  active prediction only, and ``altup.correct`` spreads what the layer changed to every copy.
- **X**, what the layer's attention reads: the active prediction after ``input_layernorm``.
- **LAuReL**: X plus RMSNorm(X·W_left·W_right), added to the attention's (post-normed) output and the active
  prediction, the sum ÷ √2.
- **Per-layer inputs**: a second embedding table (``embed_tokens_per_layer``, × √hidden_size_per_layer_input)
  plus the embeddings through ``per_layer_model_projection`` (× d_model^-½, RMS-normed), the sum × 2^-½; one
  slice per layer gates the corrected active copy (``per_layer_input_gate``, the activation, × the slice,
  ``per_layer_projection``, ``post_per_layer_input_norm``), added to every other copy.
- **Attention**: q_norm and k_norm, RMSNorms over each head's head_dim with plain γ (not Gemma 2/3's 1 + γ),
  v_norm the same without a gain; RoPE "half" with each layer type's base; the scores are *not* scaled
  (scaling 1.0); sliding or full by layer type. The last num_kv_shared_layers layers reuse the K and V of the
  last earlier layer of their type (hf_gemma3n_config.kv_source) and compute none.
- **MLP**: GeGLU with the layer's own intermediate size; in the first layers (activation_sparsity_pattern) the gate
  keeps only what lies above its row's mean + std·Φ⁻¹(sparsity) (Gaussian top-k), as transformers does.

Every RMSNorm is x·(mean(x²) + eps)^-½·γ; transformers runs each in float32 whatever the model's dtype, and its
constants (√d_model, d_model^-½, 2^-½, 1 / d_model) are float32 numbers in the model's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.hf_config import Config
from qkv_tui.importers.hf_gemma import in_dtype
from qkv_tui.importers.hf_gemma3n_config import Gemma3nText, text_config
from qkv_tui.importers.hf_rope import read_rope
from qkv_tui.importers.hf_tensors import lookup, prefix_of
from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.schedule import entry
from qkv_tui.importers.stack import ACTIVATIONS, Array, Attention, Layer, Model, Norm, QkNorm, Rope, Tokenize
from qkv_tui.kernels.attention import attend
from qkv_tui.kernels.qk_norm import qk_normalise


@dataclass(frozen=True)
class Opened:
    """One layer's attention as the forward pass saw it."""

    X: Array  # (n, d_model) the normed active prediction: what q_proj (and k_proj, v_proj) read
    heads: Array  # (n, H·head_dim) every head's output side by side: o_proj's input
    output: Array  # (n, d_model) after o_proj
    kv_source: int | None  # the layer whose K and V this one reused


class Gemma3n:
    """A Gemma 3n checkpoint's language model, opened: its tensors read as each layer needs them."""

    def __init__(self, config: Gemma3nText, tensors: TensorFiles) -> None:
        self.config, self.tensors = config, tensors
        self.p = prefix_of(tensors, "embed_tokens_per_layer.weight", "Gemma 3n")
        if config.activation not in ACTIVATIONS:
            raise ImporterError(f"config.json: hidden_activation {config.activation!r} is not supported; expected one"
                                f" of: {', '.join(ACTIVATIONS)}")
        self.act = ACTIVATIONS[config.activation]
        self._walk: _Walk | None = None

    # --- reading -------------------------------------------------------------------------------------

    def _w(self, name: str, rows: int | None, cols: int | None) -> Array:
        """An nn.Linear's weight in the x·W orientation."""
        return self.tensors.get(self.p + name, (rows, cols)).T

    def _norm(self, name: str, width: int) -> Norm:
        return Norm("rms", self.tensors.get(self.p + name, (width,)), None, self.config.eps)

    def _constant(self, value: float) -> float:
        return in_dtype(float(np.float32(value)), self.config.dtype)

    def rope(self, layer: int) -> Rope:
        kind = self.config.kind(layer)  # Gemma3nTextConfig reads rope_parameters (and the older keys) as Gemma 3's
        read = read_rope("config.json", self.config.raw, "gemma3_text", kind)
        return Rope("half", read.base, read.partial, read.scaling_table())

    def schedule(self) -> tuple[str, ...]:
        c = self.config
        return tuple(entry(c.window if c.kind(i) == "sliding_attention" else None, True, c.kv_source(i))
                     for i in range(c.num_layers))

    # --- the stream ----------------------------------------------------------------------------------

    def embed(self, ids: list[int]) -> tuple[Array, Array]:
        """The AltUp streams entering layer 0 (streams, n, d) and every layer's per-layer input (n, layers, P)."""
        c, t = self.config, self.tensors
        table = t.rows(self.p + "embed_tokens.weight", (None, c.d_model))
        x0 = lookup(table, self.p + "embed_tokens.weight", ids) * self._constant(math.sqrt(c.d_model))  # (n, d)
        per_table = t.rows(self.p + "embed_tokens_per_layer.weight", (None, c.num_layers * c.per_layer))
        per_ids = [i if 0 <= i < c.per_layer_vocab else 0 for i in ids]  # past the table: row 0, as transformers
        raw = lookup(per_table, self.p + "embed_tokens_per_layer.weight", per_ids) * self._constant(math.sqrt(c.per_layer))
        projected = x0 @ self._w("per_layer_model_projection.weight", c.num_layers * c.per_layer, c.d_model)
        projected = projected * self._constant(c.d_model ** -0.5)
        projected = self._norm("per_layer_projection_norm.weight", c.per_layer)(
            projected.reshape(len(ids), c.num_layers, c.per_layer))
        per_layer = (projected + raw.reshape(len(ids), c.num_layers, c.per_layer)) * self._constant(2 ** -0.5)
        target = np.sqrt(np.mean(x0**2, axis=-1, keepdims=True))  # (n, 1)
        streams = [x0]
        for i in range(1, c.streams):
            s = x0 @ self._w(f"altup_projections.{i - 1}.weight", c.d_model, c.d_model)
            streams.append(s * target / np.sqrt(np.maximum(np.mean(s**2, axis=-1, keepdims=True), 1e-5)))
        return np.stack(streams), per_layer

    def _modalities(self, h: str, x: Array) -> Array:
        c = self.config
        routed = self._norm(h + "altup.router_norm.weight", c.d_model)(x) * self._constant(1.0 / c.d_model)
        return np.tanh(routed @ self._w(h + "altup.modality_router.weight", c.streams, c.d_model))  # (n, streams)

    def _predict(self, h: str, streams: Array) -> Array:
        c = self.config
        coefs = self._modalities(h, streams[c.active]) @ self._w(h + "altup.prediction_coefs.weight", c.streams**2,
                                                                  c.streams)  # (n, streams²)
        coefs = coefs.reshape(-1, c.streams, c.streams)  # [t, i, j]: how much of stream j goes into prediction i
        mixed: Array = np.einsum("tij,jtd->itd", coefs, streams)  # (streams, n, d)
        return mixed + streams

    def _correct(self, h: str, predictions: Array, activated: Array) -> Array:
        c = self.config
        innovation = activated - predictions[c.active]  # (n, d)
        coefs = self._modalities(h, activated) @ self._w(h + "altup.correction_coefs.weight", c.streams, c.streams) + 1.0
        spread: Array = coefs.T[:, :, None] * innovation[None]  # (streams, n, d)
        return predictions + spread

    def _mlp(self, h: str, layer: int, x: Array) -> Array:
        c = self.config
        gate = x @ self._w(h + "mlp.gate_proj.weight", None, c.d_model)  # (n, inner)
        inner = gate.shape[1]
        sparsity = c.sparsity(layer)
        if sparsity > 0.0:  # Gaussian top-k: Φ⁻¹ in float32, as torch.distributions.Normal.icdf computes it there
            multiplier = float(np.float32(NormalDist().inv_cdf(float(np.float32(sparsity)))))
            cutoff = gate.mean(axis=-1, keepdims=True) + gate.std(axis=-1, keepdims=True) * multiplier
            gate = np.maximum(gate - cutoff, 0.0)
        up = x @ self._w(h + "mlp.up_proj.weight", inner, c.d_model)
        return (self.act(gate) * up) @ self._w(h + "mlp.down_proj.weight", c.d_model, inner)

    def attention(self, layer: int, x: Array, shared: dict[str, tuple[Array, Array]]) -> Opened:
        """Layer ``layer``'s attention on its normed input x (n, d_model); ``shared`` holds each layer type's
        stored K and V (one (kv_heads, n, head_dim) pair per type), read by a sharing layer and filled by a storing one."""
        c = self.config
        a = f"layers.{layer}.self_attn."
        d_k, n = c.head_dim, x.shape[0]
        rope = self.rope(layer)
        q_all = x @ self._w(a + "q_proj.weight", c.num_heads * d_k, c.d_model)  # (n, H·d_k)
        gamma_q = self.tensors.get(self.p + a + "q_norm.weight", (d_k,))
        source = c.kv_source(layer)
        kind = c.kind(layer)
        if source is not None:
            keys, values = shared[kind]
        else:
            k_all = x @ self._w(a + "k_proj.weight", c.num_kv_heads * d_k, c.d_model)
            v_all = x @ self._w(a + "v_proj.weight", c.num_kv_heads * d_k, c.d_model)
            gamma_k = self.tensors.get(self.p + a + "k_norm.weight", (d_k,))
            ones = np.ones(d_k)
            keys = np.stack([rope.rotate(qk_normalise(k_all[:, g * d_k:(g + 1) * d_k], gamma_k, c.eps, None).X_norm)
                             for g in range(c.num_kv_heads)])
            values = np.stack([qk_normalise(v_all[:, g * d_k:(g + 1) * d_k], ones, c.eps, None).X_norm
                               for g in range(c.num_kv_heads)])
            if layer == max(i for i in range(c.num_layers - c.shared_layers) if c.kind(i) == kind):
                shared[kind] = keys, values  # the last layer of its type before the sharing ones stores them
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        allow = (i >= j) & ((i - j < c.window) if kind == "sliding_attention" else True)
        outs = []
        for head in range(c.num_heads):
            g = head * c.num_kv_heads // c.num_heads
            q = rope.rotate(qk_normalise(q_all[:, head * d_k:(head + 1) * d_k], gamma_q, c.eps, None).X_norm)
            outs.append(attend(q, keys[g], values[g], allow, 1.0).output)  # Gemma 3n does not scale its scores
        merged = np.concatenate(outs, axis=1)
        return Opened(x, merged, merged @ self._w(a + "o_proj.weight", c.d_model, c.num_heads * d_k), source)

    def layer(self, layer: int, streams: Array, per_layer: Array, shared: dict[str, tuple[Array, Array]],
              seen: Callable[[Opened], None] | None = None) -> Array:
        """The streams after layer ``layer`` (streams, n, d); ``seen`` is handed the layer's attention."""
        c = self.config
        h = f"layers.{layer}."
        predictions = self._predict(h, streams)
        active = predictions[c.active]
        x = self._norm(h + "input_layernorm.weight", c.d_model)(active)
        left = self._w(h + "laurel.linear_left.weight", None, c.d_model)  # (d, laurel_rank)
        right = self._w(h + "laurel.linear_right.weight", c.d_model, left.shape[1])
        laurel = x + self._norm(h + "laurel.post_laurel_norm.weight", c.d_model)(x @ left @ right)
        opened = self.attention(layer, x, shared)
        if seen is not None:
            seen(opened)
        attended = self._norm(h + "post_attention_layernorm.weight", c.d_model)(opened.output)
        mixed = (active + attended + laurel) / math.sqrt(2)
        fed = self._mlp(h, layer, self._norm(h + "pre_feedforward_layernorm.weight", c.d_model)(mixed))
        out = mixed + self._norm(h + "post_feedforward_layernorm.weight", c.d_model)(fed)
        corrected = self._correct(h, predictions, out)
        first = corrected[c.active]
        if c.correct_scale:
            first = first * self.tensors.get(self.p + h + "altup.correct_output_scale", (c.d_model,))
        gated = self.act(first @ self._w(h + "per_layer_input_gate.weight", c.per_layer, c.d_model)) * per_layer[:, layer]
        gated = gated @ self._w(h + "per_layer_projection.weight", c.d_model, c.per_layer)
        corrected = corrected.copy()
        corrected[1:] += self._norm(h + "post_per_layer_input_norm.weight", c.d_model)(gated)
        return corrected

    def open(self, ids: list[int], layer: int) -> Opened:
        """Run the layers up to ``layer`` over the text's ids and return that layer's attention. The walk of the
        last text is kept, so the heads view's next layer runs one more layer, not every one again."""
        if self._walk is None or self._walk.ids != tuple(ids):
            streams, per_layer = self.embed(ids)
            self._walk = _Walk(tuple(ids), per_layer, streams, {}, [])
        walk = self._walk
        while len(walk.opened) <= layer:  # layers in order: a storing layer fills ``shared`` before its readers
            walk.streams = self.layer(len(walk.opened), walk.streams, walk.per_layer, walk.shared, walk.opened.append)
        return walk.opened[layer]


@dataclass(eq=False)
class _Walk:
    """One text's walk through the layers so far."""

    ids: tuple[int, ...]
    per_layer: Array  # (n, layers, P)
    streams: Array  # (streams, n, d) entering the next layer to run
    shared: dict[str, tuple[Array, Array]]  # each layer type's stored K and V
    opened: list[Opened]  # each layer run so far, its attention


def _not_run(x: Array) -> Array:
    raise AssertionError("Gemma 3n's layers run in Gemma3n.layer (its AltUp streams), never in stack.residual_stream")


def open_gemma3n(config: Config, tensors: TensorFiles, tokenize: Tokenize, source: str) -> Model:
    """The folder as a Model: X from Gemma3n.open's walk of the stream (normed: no [norm]), each layer's attention
    with [qk_norm] over each head (plain γ), [v_norm], scale 1 and its type's RoPE and mask; a layer that reuses an
    earlier layer's K and V has W_Q alone and [shared_kv]: the K and V its source layer stored, after that layer's
    k_norm, RoPE and v_norm, as transformers hands them over (its [qk_norm] norms Q only: K arrives normed)."""
    g = text_config("config.json", config.raw, "gemma3n_text")
    model = Gemma3n(g, tensors)
    d, H, d_k = g.d_model, g.num_heads, g.head_dim
    bias = g.raw.get("attention_bias") is True

    def layer(i: int) -> Layer:
        source_layer = g.kv_source(i)
        a = f"layers.{i}.self_attn."
        get, p = tensors.get, model.p
        kv_width = g.num_kv_heads * d_k

        def optional(name: str, width: int) -> Array | None:
            return get(p + a + name, (width,)) if bias else None

        if source_layer is None:
            W_K, W_V = model._w(a + "k_proj.weight", kv_width, d), model._w(a + "v_proj.weight", kv_width, d)
            b_K, b_V = optional("k_proj.bias", kv_width), optional("v_proj.bias", kv_width)
            gamma_k: Array = get(p + a + "k_norm.weight", (d_k,))
        else:  # transformers builds no k_proj, v_proj, k_norm or v_norm here: zeros of their shapes, never written
            W_K = W_V = np.zeros((d, kv_width))
            b_K = b_V = None
            gamma_k = np.ones(d_k)
        attention = Attention(
            model._w(a + "q_proj.weight", H * d_k, d), W_K, W_V, model._w(a + "o_proj.weight", d, H * d_k),
            optional("q_proj.bias", H * d_k), b_K, b_V, optional("o_proj.bias", d), H, g.num_kv_heads,
        )
        norm = model._norm(f"layers.{i}.input_layernorm.weight", d)
        return Layer(
            norm=norm, attention=attention, mlp_norm=norm, mlp=_not_run, scale=1.0,
            scale_from="scaling = 1.0 (Gemma 3n: no √d_k; its q_norm and k_norm set the scores' size)",
            window=g.window if g.kind(i) == "sliding_attention" else None,
            qk_norm=QkNorm("head", get(p + a + "q_norm.weight", (d_k,)), gamma_k, g.eps),
            rope=model.rope(i), v_norm=g.eps if source_layer is None else None,
            tables_on=None if source_layer is None else lambda X, heads: reused(i, source_layer, attention, heads),
        )

    def reused(i: int, source_layer: int, attention: Attention, heads: list[int]) -> dict[str, Any]:
        """A sharing layer's heads (W_Q alone) and its [shared_kv]: the K and V its source layer stored on this text
        (the walk that made X ran that layer first), one per K/V head the heads read."""
        walk = model._walk
        assert walk is not None, "the layer's X is computed (Gemma3n.open) before its tables"
        keys, values = walk.shared[g.kind(i)]
        count = g.num_kv_heads if heads == list(range(H)) else 1 + max(attention.kv_head(h) for h in heads)
        out: dict[str, Any] = {"shared_kv": {"source_layer": source_layer, "K": [keys[kv] for kv in range(count)],
                                             "V": [values[kv] for kv in range(count)]}}
        W_Q, b_Q = attention.W_Q, attention.b_Q
        if heads == list(range(H)):
            out["attention"] = {"num_heads": H, "num_kv_heads": g.num_kv_heads, "W_Q": W_Q}
            if b_Q is not None:
                out["attention"]["b_Q"] = b_Q.tolist()
            return out
        out["heads"] = []
        for h in heads:
            cut = slice(h * d_k, (h + 1) * d_k)
            table: dict[str, Any] = {"name": f"L{i} H{h}", "W_Q": np.ascontiguousarray(W_Q[:, cut]),
                                     "kv_head": attention.kv_head(h)}
            if b_Q is not None:
                table["b_Q"] = b_Q[cut].tolist()
            out["heads"].append(table)
        return out

    def stream(ids: list[int], i: int) -> Array:
        return model.open(ids, i).X

    def embed(ids: list[int]) -> Array:
        active: Array = model.embed(ids)[0][g.active]  # the first of AltUp's streams, before any layer's prediction
        return active

    said = ("Gemma 3n: X is the layer's active AltUp prediction after its input norm, what its attention reads (the"
            " model keeps four copies of the stream and runs each layer on one); its q_norm and k_norm multiply by γ"
            " itself (not Gemma 2/3's 1 + γ), its v_norm norms each value row without a gain, and its scores are not"
            " scaled.")
    def says(i: int) -> str:
        source_layer = g.kv_source(i)
        if source_layer is None:
            return said
        return said + (f" Layer {i} reuses layer {source_layer}'s K and V (Gemma 3n's cross-layer KV sharing: the last"
                       f" num_kv_shared_layers = {g.shared_layers} layers compute none): [shared_kv] gives them as"
                       f" layer {source_layer} stored them on this text, after its k_norm, RoPE and v_norm, so only Q"
                       " is projected, normed and turned here ([qk_norm]'s gamma_k is not read).")

    return Model(source, g.num_layers, H, g.context, model.rope(0), tokenize, embed, layer, model.schedule(),
                 says, stream)
