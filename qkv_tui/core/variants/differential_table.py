"""``[differential]`` as the registry holds it: its key, its keys, its lookalikes and its faces, with the functions
that read it named in its own module (core/variants/differential.py), which a scenario without the table never
loads (the loader, the stage registry and the head builders read only what is here before a file has the table)."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.variants.common import Faces, Later, Lookalikes, Table

LAMBDA_KEYS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")
DIFFERENTIAL_KEYS = (*LAMBDA_KEYS, "lambda_init", "layer", "eps", "gamma")

# keys of Hugging Face's config and module that a file copied from them may carry under the paper's names
LOOKALIKES: Lookalikes = {
    ("[differential]", "layer_idx"): ("layer", "the layer's depth, counted from 0 as transformers' layer_idx"),
    ("[differential]", "rms_norm_eps"): ("eps", "the sub-norm's eps"),
    ("[differential]", "weight"): ("gamma", "the sub-norm's gains, 2d numbers"),
}

# The part's faces beyond its keys: its head-pass hook; its stages (both maps, λ and the rest after Mix, where the
# one-map stages step aside; the backward ones after dRotate; a step on Q and K before the scores, each half on its
# own, is its own part's stage); its JSON field; its backward worksheet's tables. Registering the part is its line in
# FEATURES (core/variants/__init__.py).
FACES = Faces(
    head="qkv_tui.core.differential_part:diff_part",
    edit="qkv_tui.core.variants.differential_edit",
    stages=(
        *(("mix", "differential", name) for name in (
            "SCORE_1", "SCALE_1", "SOFTMAX_1", "SCORE_2", "SCALE_2", "SOFTMAX_2", "LAMBDA", "SUBTRACT",
            "MIX", "SUBNORM", "FACTOR")),
        *(("drotate", "differential_backward", name) for name in (  # in place of dMix … dRotate
            "FACTOR", "SUBNORM", "MIX", "SUBTRACT", "LAMBDA", "SOFTMAX_1", "SCALE_1", "SOFTMAX_2", "SCALE_2", "SCORE")),
    ),
    json="qkv_tui.edges.export_differential:differential_parts",
    worksheet_back="qkv_tui.edges.worksheet.backward.differential:SHEET",
)
# its functions are its own module's, imported on the first call (Later); that module re-exports it as Table[Differential]
_MODULE = "qkv_tui.core.variants.differential"
TABLE: Table[Any] = Table("differential", DIFFERENTIAL_KEYS, Later(f"{_MODULE}:parse_differential"),
                          Later(f"{_MODULE}:_summary"), Later(f"{_MODULE}:write_differential"),
                          LOOKALIKES, FACES, Later(f"{_MODULE}:trainable"))
