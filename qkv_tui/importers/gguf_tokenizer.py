"""The tokenizer a GGUF file describes in its ``tokenizer.ggml.*`` metadata, as a ``tokenizers`` Tokenizer.

A GGUF carries no tokenizer.json: llama.cpp's converter stores the vocabulary (``tokens``, in id
order), each token's ``token_type`` (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
6 byte), the ``scores`` or ``merges`` and the special ids. Two kinds are built here, as transformers'
GGUF loader builds them (integrations/gguf/gguf_tokenizer_mapping.py) and with llama.cpp's meaning:

- ``"gpt2"``: byte-level BPE (GPT-2, Llama 3, Qwen2/3). The tokens are spelt in GPT-2's byte
  alphabet (``Ġwas``); ``merges`` are "left right" strings; ``tokenizer.ggml.pre`` names the regexes
  that split the text before merging (llama.cpp's names and lists, SPLITS below); another name is one line.
- ``"llama"``: SentencePiece (LLaMA 1/2, Mistral): ``▁`` for a space, a ``▁`` put before the text
  (unless ``add_space_prefix`` is false), byte tokens ``<0x41>`` for what the vocabulary lacks. The
  merges are the file's if it has them, otherwise rebuilt from the scores, as SentencePiece merges:
  any two neighbours whose join is a token, the highest-scoring join first.

Control tokens (``<|endoftext|>``) are matched whole in the text as special tokens, user-defined
ones (``<think>``) as added tokens; ``add_bos_token`` (default true for "llama", as llama.cpp)
puts the BOS token first, and ``add_eos_token`` the EOS token last.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qkv_tui.base.values import show as _show
from qkv_tui.base.values import token_label
from qkv_tui.importers.errors import ImporterError, missing_package
from qkv_tui.importers.stack import Tokenize

CONTROL, USER_DEFINED, BYTE = 3, 4, 6

# The pre-tokenizers llama.cpp knows by tokenizer.ggml.pre, as its vocabulary code reads them (ggml-org/llama.cpp,
# src/llama-vocab.cpp: llama_vocab::impl::load maps each name to a LLAMA_VOCAB_PRE_TYPE_*, and
# llm_tokenizer_bpe's constructor gives each type its list of regexes). unicode_regex_split applies the list in
# order, each regex splitting every piece the previous one left and keeping its matches and the gaps between them:
# a Sequence of Split(behavior="isolated"). The strings are llama.cpp's, with two of its special cases spelt out:
# its GPT-2 regex has no final \s+, but src/unicode.cpp routes that exact string to
# unicode_regex_split_custom_gpt2, which implements "…|\s+(?!\S)|\s+"; and its Llama 3 string goes to the custom
# llama3 splitter, whose contractions are the ASCII letters either case, as written here.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
           r"|\s+(?!\S)|\s+")
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
           r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_SEED_CODER = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")
_MINICPM5 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def _names(names: str, regexes: tuple[str, ...] = ()) -> dict[str, tuple[str, ...]]:
    return dict.fromkeys(names.split(), regexes)


SPLITS: dict[str, tuple[str, ...]] = {
    # LLAMA_VOCAB_PRE_TYPE_DEFAULT (also what llama.cpp takes when the key is missing)
    **_names("default", (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]")),
    # LLAMA3, and DBRX and SMAUG with the same regex
    **_names("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano dbrx smaug-bpe", (_LLAMA3,)),
    # STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA, MELLUM2: each digit apart, then GPT-2's
    **_names("starcoder refact command-r smollm codeshell exaone minerva-7b mellum2", (r"\p{N}", _GPT2)),
    # GPT2, MPT, OLMO, JAIS, TRILLION, GRANITE_DOCLING
    **_names("gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert exaone4 mpt olmo"
             " jais trillion granite-docling", (_GPT2,)),
    # QWEN2, STABLELM2, HUNYUAN, SOLAR_OPEN
    **_names("qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan solar-open", (_QWEN2,)),
    **_names("qwen35", (_QWEN35,)),
    **_names("falcon", (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]")),
    **_names("tekken", (_TEKKEN,)),
    **_names("seed-coder", (_SEED_CODER,)),
    **_names("minicpm5", (r"\p{N}{1,3}", _MINICPM5)),
}
# llama.cpp takes a whole word that is a token as it is, before merging (ignore_merges), for these; and puts the
# BOS token first by default (add_bos) for Llama 3's and Tekken's, unless tokenizer.ggml.add_bos_token says otherwise
_IGNORE_MERGES = set(_names("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano tekken minicpm5"))
_ADD_BOS = set(_names("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano tekken"))
# names llama.cpp also knows, whose splitting (CJK ranges, custom splitters, whitespace escaping, a separator
# token) is not built here: refused by name rather than tokenized another way
_KNOWN_ELSEWHERE = set(_names(
    "deepseek-llm deepseek-coder deepseek-v3 spark2_5 youtu jais-2 gemma4 granite-embed-multi-311m sarvam-moe"
    " jina-v1-en jina-v2-code roberta-bpe whitespace poro-chat glm4 chatglm-bpe viking bloom gpt3-finnish"
    " exaone-moe chameleon gpt-4o llama4 kanana2 talkie granite-embed-multi-97m tiny_aya cohere2moe superbpe"
    " bailingmoe bailingmoe2 llada-moe hunyuan-dense hy_v4 joyai-llm kimi-k2 ufakzeka grok-2 afmoe laguna"
    " minimax-m2"
))


def gguf_tokenizer(meta: dict[str, Any], shown: str) -> Tokenize:
    try:
        from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers, processors
    except ImportError:
        raise ImporterError(missing_package("tokenizers", f"the tokenizer of {shown}")) from None
    kind = meta.get("tokenizer.ggml.model")
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(kind, str) or not isinstance(tokens, list) or not tokens:
        raise ImporterError(f"{shown} has no tokenizer (tokenizer.ggml.model and tokenizer.ggml.tokens); expected a GGUF"
                            " converted with its vocabulary")
    types = _ints(meta, "tokenizer.ggml.token_type", len(tokens), shown)
    vocab = {token: i for i, token in enumerate(tokens)}  # a repeated token keeps its last id, as llama.cpp's map does
    merges = meta.get("tokenizer.ggml.merges")
    try:
        if kind == "gpt2":
            pre = meta.get("tokenizer.ggml.pre", "default")
            if not isinstance(pre, str) or pre not in SPLITS:
                raise ImporterError(_unknown_pre(pre, shown))
            if not isinstance(merges, list):
                raise ImporterError(f"{shown}: a gpt2 (byte-level BPE) tokenizer without tokenizer.ggml.merges")
            pairs = [_pair(m, shown) for m in merges]
            tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, ignore_merges=pre in _IGNORE_MERGES))
            tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
                *(pre_tokenizers.Split(Regex(regex), behavior="isolated") for regex in SPLITS[pre]),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ])
            add_bos_default = pre in _ADD_BOS
        elif kind == "llama":
            if isinstance(merges, list):
                pairs = [_pair(m, shown) for m in merges]
            else:
                scores = meta.get("tokenizer.ggml.scores")
                if not isinstance(scores, np.ndarray) or scores.shape != (len(tokens),):
                    raise ImporterError(f"{shown}: a llama (SentencePiece) tokenizer needs tokenizer.ggml.scores, one per token")
                pairs = _merges_from_scores(tokens, scores.astype(np.float64))
            unk = meta.get("tokenizer.ggml.unknown_token_id")
            unk_token = tokens[unk] if isinstance(unk, int) and 0 <= unk < len(tokens) else None
            tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs, unk_token=unk_token, fuse_unk=True, byte_fallback=True))
            prefix = "first" if meta.get("tokenizer.ggml.add_space_prefix", True) else "never"
            tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prefix, split=False)
            add_bos_default = True
        else:
            raise ImporterError(f"{shown}: tokenizer.ggml.model {kind!r} is not supported; expected gpt2 (byte-level BPE)"
                                " or llama (SentencePiece)")
    except ImporterError:
        raise
    except Exception as exc:  # the Rust side raises plain Exception for a vocabulary it cannot take
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
        raise ImporterError(f"{shown}: its tokenizer metadata cannot be built into a tokenizer ({reason})") from None
    # control tokens are matched whole in the text; a byte-level vocabulary spells every real token in its
    # alphabet, so a "control" token outside it is a mislabel that would never match (transformers skips them too)
    special = [tokens[i] for i in np.flatnonzero(types == CONTROL)]
    if kind == "gpt2":
        alphabet = set(pre_tokenizers.ByteLevel.alphabet())
        special = [t for t in special if set(t) <= alphabet]
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in special])
    tokenizer.add_tokens([AddedToken(tokens[i], normalized=False, special=False) for i in np.flatnonzero(types == USER_DEFINED)])
    first = _special(meta, "bos", tokens, bool(meta.get("tokenizer.ggml.add_bos_token", add_bos_default)))
    last = _special(meta, "eos", tokens, bool(meta.get("tokenizer.ggml.add_eos_token", False)))
    if first or last:
        single = " ".join([*(f"{t}:0" for t, _ in first), "$A:0", *(f"{t}:0" for t, _ in last)])
        tokenizer.post_processor = processors.TemplateProcessing(single=single, special_tokens=first + last)

    def tokenize(text: str) -> tuple[list[str], list[int]]:
        encoding = tokenizer.encode(text)
        return [token_label(t) for t in encoding.tokens], [int(i) for i in encoding.ids]

    return tokenize


def _unknown_pre(pre: object, shown: str) -> str:
    said = _show(pre) if isinstance(pre, str) else f"is {type(pre).__name__}"
    if isinstance(pre, str) and pre in _KNOWN_ELSEWHERE:
        return (f"{shown}: tokenizer.ggml.pre {said} is a pre-tokenizer llama.cpp knows whose splitting qkv-tui does"
                " not build; expected one of the LLaMA/Qwen families' (llama-bpe, qwen2, smollm, starcoder, gpt-2, …)")
    return (f"{shown}: tokenizer.ggml.pre {said} is not a pre-tokenizer llama.cpp knows; expected one of its names"
            " (llama-bpe, qwen2, smollm, starcoder, gpt-2, default, …)")


def _special(meta: dict[str, Any], which: str, tokens: list[str], wanted: bool) -> list[tuple[str, int]]:
    if not wanted:
        return []
    key = f"tokenizer.ggml.{which}_token_id"
    token_id = meta.get(key)
    if not isinstance(token_id, int) or isinstance(token_id, bool) or not 0 <= token_id < len(tokens):
        return []
    return [(tokens[token_id], token_id)]


def _ints(meta: dict[str, Any], key: str, count: int, shown: str) -> np.ndarray:
    value = meta.get(key)
    if value is None:
        return np.ones(count, dtype=np.int64)  # every token normal
    if not isinstance(value, np.ndarray) or value.shape != (count,) or value.dtype.kind not in "iu":
        raise ImporterError(f"{shown}: {key} must hold one whole number per token ({count:,})")
    return value.astype(np.int64)


def _pair(merge: str, shown: str) -> tuple[str, str]:
    left, space, right = merge.partition(" ")
    if not space or not left or not right:
        raise ImporterError(f"{shown}: tokenizer.ggml.merges holds {merge[:40]!r}; expected two tokens with a space between")
    return left, right


def _merges_from_scores(tokens: list[str], scores: np.ndarray) -> list[tuple[str, str]]:
    """SentencePiece's merges: every split of a normal token into two tokens, the join's score deciding the order.

    A higher score merges first; among equal scores the longer left part, then the longer right part,
    then the vocabulary's order (the order transformers' generate_merges gives)."""
    ids = {t: i for i, t in enumerate(tokens)}
    found: list[tuple[float, int, int, int, int, int, str, str]] = []
    for i, token in enumerate(tokens):
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ids and right in ids:
                found.append((-float(scores[i]), -len(left), -len(right), i, ids[left], ids[right], left, right))
    found.sort()
    return [(left, right) for *_, left, right in found]
