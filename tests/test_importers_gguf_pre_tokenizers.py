"""A GGUF file's pre-tokenizer by the name llama.cpp reads (tokenizer.ggml.pre), split as llama.cpp splits it.

A real SmolLM2-135M GGUF says "smollm", which llama.cpp reads as it reads starcoder's (src/llama-vocab.cpp:
LLAMA_VOCAB_PRE_TYPE_SMOLLM shares STARCODER's regexes, each digit apart and then GPT-2's pattern), and was
refused. The files here are written with gguf's own writer (tests/gguf_fixtures.py) from a byte-level BPE
trained on text with numbers, so that merges join digits; the reference tokenizes without the tokenizers
library: llama.cpp's unicode_regex_split (each regex in turn splits every piece, matches and gaps kept),
done here with the ``regex`` module, then GPT-2's byte alphabet and its BPE by merge rank.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import regex  # type: ignore[import-untyped]

from qkv_tui.base.values import token_label
from qkv_tui.importers import ImporterError
from qkv_tui.importers.gguf_header import Header
from qkv_tui.importers.gguf_tokenizer import SPLITS, gguf_tokenizer

from .model_fixtures import one_error

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""  # OpenAI's encoder.py
CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
# llama.cpp's regex lists, by pre-tokenizer type (llm_tokenizer_bpe in src/llama-vocab.cpp)
EXPECTED = {
    "smollm": [r"\p{N}", GPT2],
    "starcoder": [r"\p{N}", GPT2],
    "gpt-2": [GPT2],
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"],
    "qwen2": [CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "llama-bpe": [CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
}
IGNORE_MERGES = {"llama-bpe"}
CORPUS = ["In 1865 Alice was 7, and in 1866 she was 8; 10,000 rabbits ran 2024 miles.",
          "The year 1865 came after 1864: 18 and 65, 186 and 5, then 1865 again and again!",
          "Don't stop: it's 42 o'clock, we'll say 4242 twice, 123456789 and 987654321."] * 4
TEXT = "In 1865, Alice's 3 cats ran 10,000 miles!  Don't\n\nstop at 4242 or 123456789."


def byte_alphabet() -> dict[int, str]:
    """GPT-2's bytes_to_unicode."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def llama_cpp_split(text: str, regexes: list[str]) -> list[str]:
    pieces = [text]
    for pattern in regexes:
        out = []
        for piece in pieces:
            pos = 0
            for match in regex.finditer(pattern, piece):
                out += [piece[pos:match.start()]] if match.start() > pos else []
                out += [match.group()] if match.end() > match.start() else []
                pos = match.end()
            out += [piece[pos:]] if pos < len(piece) else []
        pieces = out
    return pieces


def bpe(word: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    parts = list(word)
    while len(parts) > 1:
        pairs = [(ranks.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(itertools.pairwise(parts))]
        rank, i = min(pairs)
        if rank == 1 << 30:
            break
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts


def reference(pre: str, tok: dict[str, Any], text: str) -> list[str]:
    alphabet = byte_alphabet()
    ranks = {tuple(m.split(" ", 1)): i for i, m in enumerate(tok["merges"])}
    vocab = set(tok["tokens"])
    out: list[str] = []
    for piece in llama_cpp_split(text, EXPECTED[pre]):
        word = "".join(alphabet[b] for b in piece.encode("utf-8"))
        out += [word] if pre in IGNORE_MERGES and word in vocab else bpe(word, ranks)
    return out


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any], Path]:
    """A byte-level BPE whose merges join digits, and a tiny LLaMA (SmolLM2's architecture) of its vocabulary size."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    from .gguf_fixtures import build_hf

    folder = tmp_path_factory.mktemp("numbers")
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(GPT2), behavior="isolated"),
                                                         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer_tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=420, special_tokens=["<|endoftext|>"],
                                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                                show_progress=False))
    vocab = sorted(trainer_tok.get_vocab().items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    merges = [f"{a} {b}" for a, b in json.loads(trainer_tok.to_str())["model"]["merges"]]
    tok = {"model": "gpt2", "tokens": tokens, "types": [3 if t == "<|endoftext|>" else 1 for t in tokens],
           "merges": merges, "eos": tokens.index("<|endoftext|>"), "add_bos": False}
    model = build_hf(folder / "hf", "llama", len(tokens), d=32, head_dim=8, inter=64)
    return model, tok, folder


def written(checkpoint: tuple[Any, dict[str, Any], Path], pre: str) -> Path:
    from .gguf_fixtures import write_gguf

    model, tok, folder = checkpoint
    path = folder / f"{pre}.gguf"
    if not path.exists():
        write_gguf(path, model, "llama", tok | {"pre": pre})
    return path


def tokens_of(path: Path, text: str) -> list[str]:
    return gguf_tokenizer(Header(path, path.name).metadata, path.name)(text)[0]


def test_a_smollm_file_opens_and_splits_every_digit(cli: Callable[..., Any], checkpoint: Any, tmp_path: Path) -> None:
    smollm, gpt2 = written(checkpoint, "smollm"), written(checkpoint, "gpt-2")
    got = tokens_of(smollm, TEXT)
    digits = [t for t in got if any(c.isdigit() for c in t)]
    assert digits and all(len(t) == 1 for t in digits), got  # each digit its own token, spaces apart from them
    assert "".join(digits) == "".join(c for c in TEXT if c.isdigit())
    assert any(len([c for c in t if c.isdigit()]) > 1 for t in tokens_of(gpt2, TEXT))  # the merges do join digits
    assert got == tokens_of(written(checkpoint, "starcoder"), TEXT)  # read like starcoder's, as llama.cpp does
    path = tmp_path / "head.toml"
    path.write_text(f'[model]\nsource = "{smollm}"\ntext = "In 1865 Alice"\n')
    run = cli("--check", str(path))
    assert run.code == 0 and run.err == "", run.err


@pytest.mark.parametrize("pre", sorted(EXPECTED))
def test_each_name_splits_as_llama_cpp_does(checkpoint: Any, pre: str) -> None:
    tok = checkpoint[1]
    expected = [token_label(t) for t in reference(pre, tok, TEXT)]
    assert tokens_of(written(checkpoint, pre), TEXT) == expected


@pytest.mark.parametrize("pre", sorted(SPLITS))
def test_every_accepted_name_builds_and_tokenizes(checkpoint: Any, pre: str) -> None:
    tok = checkpoint[1]
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": tok["tokens"],
            "tokenizer.ggml.merges": tok["merges"]}
    labels, ids = gguf_tokenizer(meta, "m.gguf")("Alice ran 1865 miles, didn't she? 東京 café\n")
    assert labels and all(0 <= i < len(tok["tokens"]) for i in ids)


@pytest.mark.parametrize(("pre", "needle"), [
    ("deepseek-coder", "tokenizer.ggml.pre 'deepseek-coder' is a pre-tokenizer llama.cpp knows whose splitting qkv-tui"
                       " does not build"),
    ("gpt2", "tokenizer.ggml.pre 'gpt2' is not a pre-tokenizer llama.cpp knows; expected one of its names"),
    ("mystery-bpe", "tokenizer.ggml.pre 'mystery-bpe' is not a pre-tokenizer llama.cpp knows"),
])
def test_other_names_are_one_line(cli: Callable[..., Any], checkpoint: Any, tmp_path: Path, pre: str, needle: str) -> None:
    one_error(cli, tmp_path, str(written(checkpoint, pre)), needle)
    with pytest.raises(ImporterError):
        tokens_of(written(checkpoint, pre), TEXT)
