"""BERT (model_type "bert"): a bidirectional encoder with post-norm layers, read from a Hugging Face folder.

What differs from the decoders the stack was written for:
- the embeddings are the token's, plus the learned embedding of its position, plus the token-type
  embedding (type 0: one sentence), then a LayerNorm of their sum (``embeddings.LayerNorm``);
- post-norm: each sub-layer reads the stream as it is, and the LayerNorm comes after the residual
  add (``attention.output.LayerNorm``, ``output.LayerNorm``), so the attention has no norm of its
  own and the scenario no [norm]: X already is the previous layer's output after its LayerNorm;
- every query attends every key (mask "none"), and every projection has a bias;
- the MLP is ``intermediate.dense`` then GELU then ``output.dense`` (nn.Linear, (out, in)).
Keys may carry a ``bert.`` prefix (BertForMaskedLM and kin); the pooler and heads are never read.
"""

from __future__ import annotations

from qkv_tui.importers.hf_config import Config
from qkv_tui.importers.hf_tensors import lookup, prefix_of
from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.schedule import hf_schedule
from qkv_tui.importers.stack import ACTIVATIONS, Array, Attention, DenseMlp, Layer, Model, Norm, Tokenize


def note(layer: int) -> str:
    what = ("the sum of each token's embedding, its position's and the token-type embedding, after the embedding"
            " LayerNorm" if layer == 0 else f"layer {layer - 1}'s output after its last LayerNorm")
    return ("BERT is a post-norm encoder: each layer's attention reads the stream as it is (there is no norm before"
            " it, so no Norm stage here), and the LayerNorm comes after its output is added back. X is therefore"
            f" already normed: {what}. Every token attends every other, before and after it (mask none).")


def open_bert(config: Config, tensors: TensorFiles, tokenize: Tokenize, source: str) -> Model:
    p = prefix_of(tensors, "embeddings.word_embeddings.weight", "BERT")
    d, eps = config.d_model, config.eps
    get = tensors.get
    e = p + "embeddings."
    words = tensors.rows(e + "word_embeddings.weight", (None, d))  # (vocab, d), rows read as a text needs them
    positions = get(e + "position_embeddings.weight", (config.context, d))  # (max_positions, d)
    types = get(e + "token_type_embeddings.weight", (None, d))  # (type_vocab, d): row 0 for one sentence
    embed_norm = Norm("layer", get(e + "LayerNorm.weight", (d,)), get(e + "LayerNorm.bias", (d,)), eps)
    act = ACTIVATIONS[config.activation]

    def embed(ids: list[int]) -> Array:
        summed = lookup(words, e + "word_embeddings.weight", ids) + types[0] + positions[: len(ids)]  # (n, d_model)
        return embed_norm(summed)

    def layer(i: int) -> Layer:
        h = f"{p}encoder.layer.{i}."
        a = h + "attention.self."

        def linear(name: str, rows: int | None, cols: int) -> tuple[Array, Array]:
            weight = get(name + ".weight", (rows, cols)).T  # nn.Linear is (out, in)
            return weight, get(name + ".bias", (int(weight.shape[1]),))

        (W_Q, b_Q), (W_K, b_K), (W_V, b_V) = (linear(a + role, d, d) for role in ("query", "key", "value"))
        W_O, b_O = linear(h + "attention.output.dense", d, d)
        W_in, b_in = linear(h + "intermediate.dense", None, d)
        W_out, b_out = linear(h + "output.dense", d, int(W_in.shape[1]))
        return Layer(
            norm=Norm("layer", get(h + "attention.output.LayerNorm.weight", (d,)),
                      get(h + "attention.output.LayerNorm.bias", (d,)), eps),
            attention=Attention(W_Q, W_K, W_V, W_O, b_Q, b_K, b_V, b_O, config.num_heads, config.num_heads),
            mlp_norm=Norm("layer", get(h + "output.LayerNorm.weight", (d,)), get(h + "output.LayerNorm.bias", (d,)), eps),
            mlp=DenseMlp(W_in, b_in, W_out, b_out, act),
            scale=None,
            window=None,
            causal=False,
            post_norm=True,
        )

    return Model(source, config.num_layers, config.num_heads, config.context, None, tokenize, embed, layer,
                 hf_schedule(config), note)
