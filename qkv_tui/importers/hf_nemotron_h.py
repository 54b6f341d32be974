"""NVIDIA Nemotron-H folders (model_type "nemotron_h"), read as transformers' NemotronHForCausalLM computes them.

Every block is RMSNorm (``layers.i.norm``) → one mixer → added to the stream (``NemotronHBlock``), and the mixer
is the layer's kind (hf_nemotron_h_config.py):
- a Mamba-2 mixer (``NemotronHMamba2Mixer``, the same tensors as Mamba2Mixer's): opens as an ``[ssd]`` scenario
  through hf_mamba2.py, the z-gate and the grouped RMSNorm (n_groups groups) as the model computes them;
- grouped-query attention (``NemotronHAttention``): q/k/v/o_proj without biases (the class makes none, whatever
  attention_bias says), scores × head_dim^−½, the causal mask, and NO RoPE: its forward never calls
  apply_rotary_pos_emb; the order of the tokens reaches it only through the Mamba-2 layers below. Opens as a
  softmax scenario whose X is the stream after every earlier block;
- an MLP (``NemotronHMLP``: down_proj(relu²(up_proj(x))), biases where mlp_bias) or a mixture of experts
  (``NemotronHMoE``, :class:`NemotronMoe`): run in NumPy for the layers above them; they have no attention
  to show, so opening one is one line naming the layers that open.
Nothing adds positions to the embeddings (``embeddings.weight`` under ``backbone.`` as the Hub stores it, or
``model.``). The schedule marks Mamba-2 layers "linear", attention layers "full", MLP and MoE layers "mlp".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.hf_config import Config
from qkv_tui.importers.hf_mamba2 import mixer_table, mixer_weights
from qkv_tui.importers.hf_mlp import GroupedRouter, read_router
from qkv_tui.importers.hf_nemotron_h_config import ATTENTION, MAMBA, MLP, MOE, mixer_config
from qkv_tui.importers.hf_tensors import lookup, prefix_of
from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.stack import ACTIVATIONS, Array, Attention, DenseMlp, Layer, Model, Norm, Tokenize
from qkv_tui.kernels.ssd import mixer

ENTRY = {MAMBA: "linear", ATTENTION: "full", MLP: "mlp", MOE: "mlp"}  # each kind's [input] schedule entry


def relu2(x: Array) -> Array:
    """Nemotron's activation (transformers' ReLUSquaredActivation): relu(x)²."""
    out: Array = np.square(np.maximum(x, 0.0))
    return out


MLP_ACTIVATIONS: dict[str, Callable[[Array], Array]] = {**ACTIVATIONS, "relu2": relu2}


@dataclass(frozen=True, eq=False)
class NemotronMoe:
    """NemotronHMoE: NemotronHTopkRouter (DeepSeek-V3's: σ of the router logits; each token's top_k experts by σ +
    e_score_correction_bias among the topk_group groups whose two best such scores sum highest; the chosen σ,
    renormalised with norm_topk_prob (+ 1e-20), times routed_scaling_factor, weigh them). Each expert is
    relu²(h·W_up)·W_down with no gate, on h = x (or x·W_latent_in where moe_latent_size projects it first, and back
    after); the shared expert (an MLP on x) is added."""

    router: GroupedRouter
    # expert e's (W_up (d_in, inner), W_down (inner, d_in)), read when a token picks it: a released checkpoint has
    # 128 experts a layer, and widening every one to float64 to run a dozen tokens would take gigabytes
    expert: Callable[[int], tuple[Array, Array]]
    act: Callable[[Array], Array]
    shared: DenseMlp
    latent_in: Affine | None  # fc1_latent_proj, or None
    latent_out: Affine | None  # fc2_latent_proj

    def __call__(self, x: Array) -> Array:
        chosen, weights = self.router.choose(x)
        h = x if self.latent_in is None else self.latent_in(x)  # (n, d_in)
        read = {e: self.expert(e) for e in sorted({int(e) for e in chosen.ravel()})}
        routed = np.zeros_like(h)
        for row in range(x.shape[0]):
            for slot in range(self.router.top_k):
                W_up, W_down = read[int(chosen[row, slot])]
                routed[row] += weights[row, slot] * (self.act(h[row] @ W_up) @ W_down)
        out = routed if self.latent_out is None else self.latent_out(routed)
        return out + self.shared(x)


@dataclass(frozen=True, eq=False)
class Affine:
    """One nn.Linear (the latent projections) as x·W + b."""

    W: Array  # (in, out)
    b: Array | None

    def __call__(self, x: Array) -> Array:
        out: Array = x @ self.W
        return out if self.b is None else out + self.b


def _dense(tensors: TensorFiles, m: str, d_in: int, d_out: int | None, act: Callable[[Array], Array]) -> DenseMlp:
    """An up_proj/down_proj MLP under ``m`` (nn.Linear (out, in), transposed), biases where the checkpoint has them."""
    get = tensors.get
    up = get(m + "up_proj.weight", (None, d_in))  # (inner, d_in)
    inner = int(up.shape[0])
    out = d_in if d_out is None else d_out
    return DenseMlp(up.T, get(m + "up_proj.bias", (inner,)) if m + "up_proj.bias" in tensors else None,
                    get(m + "down_proj.weight", (out, inner)).T,
                    get(m + "down_proj.bias", (out,)) if m + "down_proj.bias" in tensors else None, act)


def _linear(tensors: TensorFiles, name: str, d_in: int) -> Affine:
    W = tensors.get(name + ".weight", (None, d_in))  # (out, in)
    return Affine(W.T, tensors.get(name + ".bias", (int(W.shape[0]),)) if name + ".bias" in tensors else None)


def read_moe(config: Config, tensors: TensorFiles, m: str, act: Callable[[Array], Array]) -> NemotronMoe:
    """The mixture of experts under ``m`` (a layer's "mixer."): experts one by one as the Hub stores them, or
    transformers' merged (experts, out, in) form."""
    raw, get, d = config.raw, tensors.get, config.d_model
    E = raw["n_routed_experts"]
    latent = raw.get("moe_latent_size")
    d_in = d if latent is None else int(latent)
    expert: Callable[[int], tuple[Array, Array]]
    if m + "experts.up_proj" in tensors:  # (E, inner, d_in) and (E, d_in, inner), left in the file
        ups = tensors.rows(m + "experts.up_proj", (E, None, d_in))
        downs = tensors.rows(m + "experts.down_proj", (E, d_in, ups.shape[1]))

        def expert(e: int) -> tuple[Array, Array]:
            return ups[[e]][0].T, downs[[e]][0].T
    else:  # the Hub's: one nn.Linear (out, in) an expert; every shape checked now, each read when picked
        inner = tensors.rows(f"{m}experts.0.up_proj.weight", (None, d_in)).shape[0]
        for e in range(E):
            for name, shape in (("up_proj", (inner, d_in)), ("down_proj", (d_in, inner))):
                tensors.rows(f"{m}experts.{e}.{name}.weight", shape)  # refused here if missing or misshapen

        def expert(e: int) -> tuple[Array, Array]:
            return (get(f"{m}experts.{e}.up_proj.weight", (inner, d_in)).T,
                    get(f"{m}experts.{e}.down_proj.weight", (d_in, inner)).T)
    router = read_router(tensors, m, E, d, raw["num_experts_per_tok"], raw["n_group"], raw["topk_group"],
                         raw["norm_topk_prob"] is not False, float(raw["routed_scaling_factor"]))
    latent_in = latent_out = None
    if latent is not None:
        latent_in, latent_out = _linear(tensors, m + "fc1_latent_proj", d), _linear(tensors, m + "fc2_latent_proj", d_in)
    return NemotronMoe(router, expert, act, _dense(tensors, m + "shared_experts.", d, None, act), latent_in, latent_out)


def _spans(layers: list[int]) -> str:
    """0, 2, 4–6: layer numbers, runs of consecutive ones as a range."""
    runs: list[list[int]] = []
    for i in layers:
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)


def openable(kinds: list[str]) -> str:
    """Which layers open, in words: 'attention 2, 5; Mamba-2 0, 4'."""
    said = []
    for kind, word in ((ATTENTION, "attention"), (MAMBA, "Mamba-2")):
        found = [i for i, k in enumerate(kinds) if k == kind]
        if found:
            said.append(f"{word} {_spans(found)}")
    return "; ".join(said) or "none"


def no_mixer(source: str, kinds: list[str], layer: int) -> ImporterError:
    what = "an MLP" if kinds[layer] == MLP else "a mixture-of-experts MLP"
    return ImporterError(
        f"{_show(source)}: layer {layer} is {what} block (layers_block_type {kinds[layer]!r}): it has no attention and"
        f" no Mamba-2 mixer to show; the layers that open are: {openable(kinds)}"
    )


def _before(kinds: list[str], layer: int) -> str:
    counts = [(sum(1 for k in kinds[:layer] if k == kind), word) for kind, word in
              ((MAMBA, "Mamba-2 mixer"), (ATTENTION, "attention"), (MLP, "MLP (relu²)"), (MOE, "mixture-of-experts"))]
    said = [f"{c} {word} output{'s' * (c != 1)}" for c, word in counts if c]
    return ("X is the token embeddings (no positions are added)." if not said else
            f"X is the embeddings with every earlier block's output added: {', '.join(said)}.")


def note(config: Config, kinds: list[str], layer: int) -> str:
    raw = config.raw
    if kinds[layer] == MAMBA:
        G = raw["n_groups"]
        return (f"Nemotron-H Mamba-2 layer: RMSNorm, then the mixer, added to the stream. Its {raw['mamba_num_heads']}"
                f" heads are SSD heads of head_dim {raw['mamba_head_dim']} in {G} group{'s' * (G != 1)} sharing B and"
                f" C (d_state {raw['ssm_state_size']}); dt is clamped below at time_step_min ="
                f" {_show(raw['time_step_min'])} as NemotronHMamba2Mixer does, and each head's W_Q, W_K and W_V are"
                f" zeros the [ssd] part does not read. {_before(kinds, layer)}")
    if kinds[layer] == ATTENTION:
        return (f"Nemotron-H attention layer: RMSNorm, then {config.num_heads} query heads sharing"
                f" {config.num_kv_heads} K/V heads, no biases and no RoPE (the order of the tokens reaches it only"
                f" through the Mamba-2 layers' convolutions and recurrences). {_before(kinds, layer)}")
    return ""


def open_nemotron_h(config: Config, tensors: TensorFiles, tokenize: Tokenize, source: str) -> Model:
    raw = config.raw
    kinds: list[str] = raw["layers_block_type"]
    p = prefix_of(tensors, "embeddings.weight", "nemotron_h (NemotronHForCausalLM)")
    d, H, H_kv, d_k = config.d_model, config.num_heads, config.num_kv_heads, config.head_dim
    table = tensors.rows(p + "embeddings.weight", (None, d))  # (vocab, d), rows read as a text needs them
    act = MLP_ACTIVATIONS[raw["mlp_hidden_act"]]
    mamba = mixer_config(raw)
    get = tensors.get

    def embed(ids: list[int]) -> Array:
        return lookup(table, p + "embeddings.weight", ids)  # (n, d_model): no position embeddings

    def nothing(x: Array) -> Array:  # the block's one mixer is its only sub-layer: nothing else is added
        return np.zeros_like(x)

    def unread(heads: int, width: int, W_O: Array, b_O: Array | None) -> Attention:
        return Attention(np.zeros((d, heads)), np.zeros((d, heads)), np.zeros((d, heads * width)), W_O, None, None,
                         None, b_O, heads, heads)

    def layer(i: int) -> Layer:
        h = f"{p}layers.{i}."
        m = h + "mixer."
        norm = Norm("rms", get(h + "norm.weight", (d,)), None, config.eps)
        kind = kinds[i]
        if kind == ATTENTION:
            q, kv = H * d_k, H_kv * d_k
            att = Attention(get(m + "q_proj.weight", (q, d)).T, get(m + "k_proj.weight", (kv, d)).T,
                            get(m + "v_proj.weight", (kv, d)).T, get(m + "o_proj.weight", (d, q)).T, None, None, None,
                            None, H, H_kv)
            return Layer(norm=norm, attention=att, mlp_norm=norm, mlp=nothing, scale=None, window=None, rotary=False)
        if kind == MAMBA:
            named = {k: get(k, (None,) * len(tensors.entries[k].shape)) for k in tensors.names() if k.startswith(m)}
            w = mixer_weights(mamba, named, m)

            def tables_on(X_hat: Array, heads: list[int]) -> dict[str, Any]:
                if heads != list(range(H)):  # the default is every head; a Mamba-2 layer's heads are normed together
                    raise ImporterError(
                        f"{_show(source)}: layer {i} is a Mamba-2 layer; its heads are normed together (the gated"
                        " RMSNorm of y·SiLU(z) runs over each group's heads), so the scenario needs every head; leave"
                        " out model.heads")
                return {"ssd": mixer_table(X_hat, w)}

            return Layer(norm=norm, attention=unread(w.num_heads, w.head_dim, w.W_out, w.b_out), mlp_norm=norm,
                         mlp=nothing, scale=None, window=None, rotary=False, attend=lambda x, rope: mixer(x, w).output,
                         tables_on=tables_on)
        feed = _dense(tensors, m, d, None, act) if kind == MLP else read_moe(config, tensors, m, act)

        def refuse(X_hat: Array, heads: list[int]) -> dict[str, Any]:
            raise no_mixer(source, kinds, i)

        # the walk adds nothing for the absent mixer, then the MLP on the same norm: the block's own single add
        return Layer(norm=norm, attention=unread(1, 1, np.zeros((1, d)), None), mlp_norm=norm, mlp=feed, scale=None,
                     window=None, rotary=False, attend=lambda x, rope: np.zeros_like(x), tables_on=refuse)

    return Model(source, config.num_layers, H, config.context, None, tokenize, embed, layer,
                 tuple(ENTRY[k] for k in kinds), lambda i: note(config, kinds, i), positionless=True)
