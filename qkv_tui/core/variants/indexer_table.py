"""``[indexer]`` as the registry holds it: its key, its keys, its lookalikes and its faces, with the functions that
read it named in its own module (core/variants/indexer.py), which a scenario without the table never loads."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.variants.common import Faces, Later, Table

INDEXER_KEYS = ("num_heads", "W_q", "W_k", "W_w", "k_norm", "rope_dims", "rope_layout", "top_k")
WHERE = "[indexer]"

# transformers' names for the same things (DeepseekV32Indexer, GlmMoeDsaIndexer and their configs)
LOOKALIKES = {
    (WHERE, "index_n_heads"): ("num_heads", "transformers' index_n_heads is num_heads here"),
    (WHERE, "index_topk"): ("top_k", "transformers' index_topk is top_k here"),
    (WHERE, "wq_b"): ("W_q", "transformers' wq_b is W_q here, as X·W (its weight transposed)"),
    (WHERE, "wk"): ("W_k", "transformers' wk is W_k here, as X·W (its weight transposed)"),
    (WHERE, "weights_proj"): ("W_w", "transformers' weights_proj is W_w here, as X·W (its weight transposed)"),
    (WHERE, "qk_rope_head_dim"): ("rope_dims", "the turned dimensions of every index vector"),
    (WHERE, "index_head_dim"): ("W_k", "d_I is W_k's column count"),
    (WHERE, "layout"): ("rope_layout", "the indexer's own RoPE layout, which may differ from [rope]'s"),
}

# its faces beyond the keys: the head-pass builder whose selection narrows every head's mask, the Index and Select
# stages (after Norm: the indexer reads what the heads read, before any head projects), the JSON field
FACES = Faces(head="qkv_tui.core.indexer_part:indexer_part",
              stages=tuple(("norm", "indexer", name) for name in ("INDEX", "SELECT")),
              json="qkv_tui.edges.export_indexer:indexer_fields",
              compared="its selection as every head's mask",
              edit="qkv_tui.core.variants.indexer_edit")
# its functions are its own module's, imported on the first call (Later); that module re-exports it as Table[Indexer]
_MODULE = "qkv_tui.core.variants.indexer"
TABLE: Table[Any] = Table("indexer", INDEXER_KEYS, Later(f"{_MODULE}:parse_indexer"), Later(f"{_MODULE}:_summary"),
                          Later(f"{_MODULE}:write_indexer"), LOOKALIKES, FACES)
