"""Where a scenario's own scale comes from: ``scale_from``, a short text beside ``scale`` that the Scale stage
quotes (``"√query_pre_attn_scalar = √256 (Gemma 2)"``); the importers set it from a model's config
(docs/scenario-format.md, "scale and scale_from")."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.variants.common import Features, Keys

KEY = "scale_from"
MAX_LENGTH = 80  # a short phrase: it joins a sentence of the Scale stage and a pane's title


def summary_parts(sc: Features) -> list[str]:
    origin = getattr(sc, KEY, None)
    return [] if origin is None else [f"scale from {origin}"]


def check(v: Any, doc: dict[str, Any]) -> str | None:
    """``scale_from`` as given: one line of text, with ``scale`` beside it (it names where that number comes from)."""
    if KEY not in doc:
        return None
    text: str = v.string(doc[KEY], KEY)
    if "scale" not in doc:
        raise v.fail("scale_from needs scale beside it: it says where the scenario's scale comes from")
    if not text.strip():
        raise v.fail("scale_from is empty; expected a short text such as \"1/attention_multiplier\"")
    if len(text) > MAX_LENGTH:
        raise v.fail(f"scale_from has {len(text)} characters; expected a short text of at most {MAX_LENGTH}")
    return text


KEYS = Keys(summary_parts)
