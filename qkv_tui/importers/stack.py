"""What every source is turned into: a decoder stack in NumPy, and the forward pass up to a layer.

A source (glassllm, a Hugging Face folder) says how to tokenize, embed and read layer i; this
module runs the layers before the chosen one (attention, then the MLP, each with its residual,
pre-norm as GPT-2, LLaMA and glassllm all are) so X is the residual stream entering it. Everything
is float64: the weights are widened once when read, each earlier layer's only when it runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from qkv_tui.kernels.attention import Turn, attend, project
from qkv_tui.kernels.deltanet_layer import DeltaLayerWeights, deltanet_layer
from qkv_tui.kernels.gate import gate
from qkv_tui.kernels.mla import MlaWeights, mla_head, mla_shared
from qkv_tui.kernels.mla_rope import Rotary, rotary_width
from qkv_tui.kernels.norm import normalise
from qkv_tui.kernels.policy import EXACT
from qkv_tui.kernels.qk_norm import qk_normalise
from qkv_tui.kernels.rope import angles_at, pairs, turn
from qkv_tui.kernels.rope_scaling import inv_freq, turn_scaled, yarn_default_factor
from qkv_tui.kernels.sharing import kv_head_of
from qkv_tui.kernels.softcap import CapSpec
from qkv_tui.kernels.softmax import softmax_rows

Array = npt.NDArray[np.float64]
Tokenize = Callable[[str], tuple[list[str], list[int]]]  # text -> (labels, ids)


@dataclass(frozen=True, eq=False)
class Norm:
    """RMSNorm or LayerNorm with the model's own eps (the scenario format's [norm], docs/scenario-format.md)."""

    kind: str  # "rms" | "layer"
    gamma: Array  # (d_model,)
    beta: Array | None  # (d_model,), LayerNorm only
    eps: float

    def __call__(self, x: Array) -> Array:
        """x normalised along its last axis (the engine's own norm, exactly)."""
        return normalise(EXACT, self.kind, x, self.gamma, self.beta, self.eps).X_norm


@dataclass(frozen=True, eq=False)
class Rope:
    layout: str  # "interleaved" (pairs 2i, 2i+1) | "half" (pairs i, i + d_k/2)
    base: float
    partial: float = 1.0  # Hugging Face's partial_rotary_factor: the first int(partial·d_k) dimensions turn
    scaling: dict[str, Any] | None = None  # [rope.scaling] as the scenario spells it: "type", then its fields

    def thetas(self, d_k: int) -> tuple[Array, float]:
        """(the frequencies of heads d_k wide (r/2,), YaRN's attention factor on cos and sin), scaled as given."""
        fields = dict(self.scaling or {"type": "default"})
        return inv_freq(fields.pop("type"), self.base, d_k, partial_rotary_factor=self.partial, **fields)

    def latent_turn(self, d_rope: int, n: int) -> Turn:
        """[mla]'s rotation of q_R and k_R at positions 0 … n − 1: cos and sin of the (scaled) angles, times YaRN's
        attention factor (as transformers' rotary embedding hands them to the attention and the indexer)."""
        thetas, a = self.thetas(d_rope)
        angles_ = angles_at(thetas, np.arange(n, dtype=np.float64))  # (n, d_rope/2)
        return Turn(np.cos(angles_) * a, np.sin(angles_) * a, pairs(self.layout, d_rope))

    def latent_divisor(self, d_qk: int) -> float:
        """[mla]'s divisor: √d_qk, over m² where DeepSeek's YaRN gives mscale_all_dim (DeepseekV3Attention's
        softmax_scale·mscale²; core/variants/mla.py divisor)."""
        fields = dict(self.scaling or {})
        m = None
        if fields.get("type") == "yarn" and fields.get("mscale_all_dim"):
            m = yarn_default_factor(float(fields["factor"]), float(fields["mscale_all_dim"]))
        return math.sqrt(d_qk) if m is None or m == 1.0 else math.sqrt(d_qk) / (m * m)

    def rotate(self, x: Array) -> Array:
        """Rotate the rows of x (n, d_k), row p by position p."""
        positions = np.arange(x.shape[0], dtype=np.float64)
        if self.partial == 1.0 and self.scaling is None:
            return turn(x, self.layout, self.base, positions)
        thetas, a = self.thetas(int(x.shape[1]))  # (r/2,), the attention factor
        return turn_scaled(x, self.layout, thetas, a, positions)


@dataclass(frozen=True, eq=False)
class Attention:
    """One layer's attention in the x·W orientation (rows = inputs), heads side by side in the columns."""

    W_Q: Array  # (d_model, H·d_k)
    W_K: Array  # (d_model, H_kv·d_k)
    W_V: Array  # (d_model, H_kv·d_v)
    W_O: Array  # (H·d_v, d_model)
    b_Q: Array | None
    b_K: Array | None
    b_V: Array | None
    b_O: Array | None
    num_heads: int
    num_kv_heads: int

    @property
    def d_k(self) -> int:
        return int(self.W_Q.shape[1]) // self.num_heads

    @property
    def d_v(self) -> int:
        return int(self.W_V.shape[1]) // self.num_kv_heads

    def kv_head(self, head: int) -> int:
        return kv_head_of(head, self.num_heads, self.num_kv_heads)


@dataclass(frozen=True, eq=False)
class QkNorm:
    """QK-norm: an RMSNorm of each query and key vector after the projection, before RoPE ([qk_norm])."""

    over: str  # "head": each head's d_k columns on their own (Qwen3); "all": the whole projection (OLMo 2)
    gamma_q: Array  # (d_k,) for "head", (H·d_k,) for "all"
    gamma_k: Array  # (d_k,) for "head", (H_kv·d_k,) for "all"
    eps: float


@dataclass(frozen=True, eq=False)
class Layer:
    norm: Norm  # before attention
    attention: Attention
    mlp_norm: Norm  # before the MLP
    mlp: Callable[[Array], Array]  # (n, d_model) -> (n, d_model)
    scale: float | None  # what scores are divided by; None = sqrt(d_k)
    window: int | None  # a sliding window (0 <= i - j < window), None = plain causal
    rotary: bool = True  # False: a layer without RoPE (SmolLM3's NoPE layers) even where the model has it
    causal: bool = True  # False: every query attends every key (BERT's bidirectional encoder)
    post_norm: bool = False  # True: norm and mlp_norm come after each residual add (BERT), not before the sub-layer
    residual_scale: float = 1.0  # each sub-layer's output is multiplied by this before it is added (Granite)
    softcap: float | None = None  # Gemma 2's cap c of c·tanh(scaled / c); None = no soft-cap
    scale_from: str | None = None  # where a scale other than sqrt(d_k) comes from, in words (docs/scenario-format.md)
    qk_norm: QkNorm | None = None  # Qwen3's and OLMo 2's norm of Q and K before RoPE
    norm_after: bool = False  # True: norm and mlp_norm apply to each sub-layer's output before its add (OLMo 2)
    sinks: Array | None = None  # (H,) gpt-oss's per-head sink logit, joining each row's softmax
    post_attention_norm: Norm | None = None  # Gemma's sandwich: a norm of the attention's output before its add
    post_mlp_norm: Norm | None = None  # and of the MLP's
    rope: Rope | None = None  # the layer's own RoPE over the model's (Gemma 3's sliding layers have another base)
    mla: MlaWeights | None = None  # DeepSeek's latent attention, computed from the latent (attention holds its shapes)
    W_G: Array | None = None  # (d_model, H·d_v) Qwen3.5's output gate: each head's output ⊙ σ(x·W_G_h), before W_O
    deltanet: DeltaLayerWeights | None = None  # a Gated DeltaNet layer (Qwen3-Next, Qwen3.5): the delta rule, no softmax
    value_scale: float = 1.0  # every head's V multiplied by it after the projection (MiMo-V2-Flash)
    v_norm: float | None = None  # the eps of an RMSNorm of every value row, no gain (Gemma 3n); None = none
    # a layer whose attention is a part's own (DiffLlama's, hf_diffllama.py; DeepSeek-V3.2's [mla] with its indexer,
    # hf_deepseek_v32.py): its forward over the normed input with the layer's RoPE, run in place of any other, and the
    # scenario tables it adds for the chosen heads (expand.py writes them beside the heads)
    attend: Callable[[Array, Rope | None], Array] | None = None
    tables: Callable[[list[int]], dict[str, Any]] | None = None
    # a part's tables made from the layer's normed input X̂ (n, d_model) for the chosen heads (Mamba-2's [ssd]: z, x,
    # B and C as its mixer computes them from X̂, hf_mamba2_folder.py)
    tables_on: Callable[[Array, list[int]], dict[str, Any]] | None = None


def attention_forward(layer: Layer, rope: Rope | None, x: Array) -> Array:
    """The attention sub-layer's output for the normed input x (n, d_model): every head, then W_O."""
    att = layer.attention
    rope = layer.rope if layer.rope is not None else rope
    if layer.attend is not None:  # a part's own forward, over [mla] too (DeepSeek-V3.2's indexer narrows its mask)
        return layer.attend(x, rope if layer.rotary else None)
    if layer.mla is not None:
        return _mla_forward(layer.mla, att.W_O, rope if layer.rotary else None, x)
    if layer.deltanet is not None:
        return deltanet_layer(layer.deltanet, x)
    n = x.shape[0]
    d_k, d_v = att.d_k, att.d_v
    # every head's projection at once (the model's own matrices), then one head at a time
    q_all = project(x, att.W_Q, att.b_Q)  # (n, H·d_k)
    k_all = project(x, att.W_K, att.b_K)  # (n, H_kv·d_k)
    v_all = project(x, att.W_V, att.b_V)  # (n, H_kv·d_v)
    qkn = layer.qk_norm
    if qkn is not None and qkn.over == "all":  # OLMo 2: each token's whole projection, before it is cut into heads
        q_all = normalise(EXACT, "rms", q_all, qkn.gamma_q, None, qkn.eps).X_norm
        k_all = normalise(EXACT, "rms", k_all, qkn.gamma_k, None, qkn.eps).X_norm
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    allow = (i - j >= 0) & (i - j < (layer.window if layer.window is not None else n + 1))
    if not layer.causal:
        allow = np.ones((n, n), dtype=bool)
    scale = layer.scale if layer.scale is not None else math.sqrt(d_k)
    outputs = []
    for h in range(att.num_heads):
        g = att.kv_head(h)
        q = q_all[:, h * d_k:(h + 1) * d_k]
        k = k_all[:, g * d_k:(g + 1) * d_k]
        v = v_all[:, g * d_v:(g + 1) * d_v] * layer.value_scale
        if layer.v_norm is not None:
            v = qk_normalise(v, np.ones(d_v), layer.v_norm, None).X_norm
        if qkn is not None and qkn.over == "head":
            q = qk_normalise(q, qkn.gamma_q, qkn.eps, None).X_norm
            k = qk_normalise(k, qkn.gamma_k, qkn.eps, None).X_norm
        if rope is not None and layer.rotary:
            q, k = rope.rotate(q), rope.rotate(k)
        sink = None if layer.sinks is None else float(layer.sinks[h])
        step = None if layer.softcap is None else CapSpec(layer.softcap)
        out = attend(q, k, v, allow, scale, beside=sink, step=step).output  # (n, d_v)
        if layer.W_G is not None:  # the engine's gate: σ of the normed input's own columns for this head
            out = gate(x, layer.W_G[:, h * d_v:(h + 1) * d_v], out).gated
        outputs.append(out)
    return project(np.concatenate(outputs, axis=1), att.W_O, att.b_O)


def _mla_forward(w: MlaWeights, W_O: Array, rope: Rope | None, x: Array) -> Array:
    """Latent attention (kernels/mla.py) over the normed input x (n, d_model), causal, RoPE (DeepSeek's YaRN where
    scaled) on its rotary parts."""
    n = x.shape[0]
    rotary = Rotary(None if rope is None else rope.latent_turn(rotary_width(w), n))
    divisor = math.sqrt(w.d_qk) if rope is None else rope.latent_divisor(w.d_qk)
    allow = np.tril(np.ones((n, n), dtype=bool))
    shared = mla_shared(x, w, rotary)
    outputs = [mla_head(shared, w, h, allow, divisor, rotary).attended.output for h in range(w.num_heads)]
    return project(np.concatenate(outputs, axis=1), W_O, None)  # (n, d_model)


def residual_stream(embedded: Array, layers: Iterable[Layer], rope: Rope | None) -> Array:
    """Run whole blocks (attention and MLP, each added back) over the embeddings: the input of the next layer."""
    x = embedded
    for layer in layers:
        if layer.post_norm:  # BERT: the sub-layer reads the stream as it is; the sum is normed
            x = layer.norm(x + attention_forward(layer, rope, x))
            x = layer.mlp_norm(x + layer.mlp(x))
            continue
        if layer.norm_after:  # OLMo 2: the sub-layer reads the stream as it is; its output is normed, then added
            x = x + layer.norm(attention_forward(layer, rope, x))
            x = x + layer.mlp_norm(layer.mlp(x))
            continue
        r = layer.residual_scale
        attended = attention_forward(layer, rope, layer.norm(x))
        x = x + r * (attended if layer.post_attention_norm is None else layer.post_attention_norm(attended))
        fed = layer.mlp(layer.mlp_norm(x))
        x = x + r * (fed if layer.post_mlp_norm is None else layer.post_mlp_norm(fed))
    return x


# --- MLPs and their activations ---------------------------------------------------


def _gelu_tanh(x: Array) -> Array:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _gelu_erf(x: Array) -> Array:
    erf: Array = np.vectorize(math.erf, otypes=[np.float64])(x / math.sqrt(2.0))  # NumPy has no erf
    return 0.5 * x * (1.0 + erf)


def _silu(x: Array) -> Array:
    return x / (1.0 + np.exp(-x))


ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "gelu_new": _gelu_tanh,  # GPT-2's
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu_fast": _gelu_tanh,
    "gelu": _gelu_erf,
    "relu": lambda x: np.maximum(x, 0.0),
    "silu": _silu,  # LLaMA's (SwiGLU gate)
    "swish": _silu,
    "quick_gelu": lambda x: x / (1.0 + np.exp(-1.702 * x)),
}


@dataclass(frozen=True, eq=False)
class DenseMlp:
    """GPT-2's MLP: act(x·W_in + b_in)·W_out + b_out."""

    W_in: Array
    b_in: Array | None
    W_out: Array
    b_out: Array | None
    act: Callable[[Array], Array]

    def __call__(self, x: Array) -> Array:
        return project(self.act(project(x, self.W_in, self.b_in)), self.W_out, self.b_out)


@dataclass(frozen=True, eq=False)
class GatedMlp:
    """LLaMA's and glassllm's SwiGLU: (act(x·W_gate) ⊙ x·W_up)·W_down."""

    W_gate: Array
    W_up: Array
    W_down: Array
    act: Callable[[Array], Array]

    def __call__(self, x: Array) -> Array:
        return (self.act(x @ self.W_gate) * (x @ self.W_up)) @ self.W_down


@dataclass(frozen=True, eq=False)
class MoeMlp:
    """gpt-oss's mixture of experts: each token's top-k experts by router logit, weighted by a softmax over those k.

    An expert is a clamped SwiGLU whose gate and up columns interleave (gate 2i, up 2i + 1):
    (clip(up, ±limit) + 1) · g·σ(α·g) with g = min(gate, limit), then its down projection. Weights are
    already x·W (gpt-oss stores experts as (in, out)).
    """

    W_router: Array  # (d_model, experts)
    b_router: Array  # (experts,)
    W_gate_up: Array  # (experts, d_model, 2·inner)
    b_gate_up: Array  # (experts, 2·inner)
    W_down: Array  # (experts, inner, d_model)
    b_down: Array  # (experts, d_model)
    top_k: int
    alpha: float
    limit: float

    def __call__(self, x: Array) -> Array:
        logits = x @ self.W_router + self.b_router  # (n, experts)
        chosen = np.argsort(-logits, axis=1, kind="stable")[:, : self.top_k]  # (n, k), the largest first
        top = np.take_along_axis(logits, chosen, axis=1)  # (n, k)
        weights = softmax_rows(top).weights  # (n, k) the router's softmax over the chosen experts
        out = np.zeros_like(x)  # (n, d_model)
        for row in range(x.shape[0]):
            for slot in range(self.top_k):
                e = int(chosen[row, slot])
                gate_up = x[row] @ self.W_gate_up[e] + self.b_gate_up[e]  # (2·inner,)
                gate, up = np.minimum(gate_up[0::2], self.limit), np.clip(gate_up[1::2], -self.limit, self.limit)
                glu = gate / (1.0 + np.exp(-self.alpha * gate))
                out[row] += weights[row, slot] * (((up + 1.0) * glu) @ self.W_down[e] + self.b_down[e])
        return out


@dataclass(frozen=True, eq=False)
class Model:
    """A source, opened: enough to tokenize a text and read any layer."""

    name: str  # as the [model] table names it, for messages
    num_layers: int
    num_heads: int  # query heads per layer
    context: int  # the longest token sequence the model takes
    rope: Rope | None  # None: positions are learned and already in the embeddings
    tokenize: Tokenize
    embed: Callable[[list[int]], Array]  # ids -> (n, d_model), position embeddings included
    layer: Callable[[int], Layer]
    schedule: tuple[str, ...] = ()  # each layer's attention, as [input] schedule spells it (core/layer_schedule.py)
    note: Callable[[int], str] = lambda layer: ""  # what layer i's scenario cannot show (BERT's post-norm)
    # X as layer i's attention reads it, already normed, from the model's own walk of its stream (Gemma 3n's AltUp
    # streams are not one residual stream); None: residual_stream over layer(0 … i − 1), then the layer's [norm]
    stream: Callable[[list[int], int], Array] | None = None
    positionless: bool = False  # True: rope is None, yet no positions are in the embeddings either (Mamba-2)
