"""An integer of 5,000 digits in any key of the format is one clean error line, never a traceback.

Python refuses ``str()`` of an integer past 4,300 digits, and TOML's hexadecimal integers have
no such limit, so a file can hand the loader one anywhere. Every key of every table is tried
(the tables come from the loader's own list, so a key added later is tried too), as the whole
value and, in a list, as one of its items.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from qkv_tui.base.values import LongInt, show, tame
from qkv_tui.core.scenario import key_tables

BIG = 10**4999  # exactly 5,000 digits
X4 = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
W4 = [[1, 0], [0, 1], [1, 0], [0, 1]]
BASE: dict[str, Any] = {"tokens": ["I", "love", "AI"], "X": X4, "heads": [{"W_Q": W4, "W_K": W4, "W_V": W4}]}
SPLIT = {"num_heads": 2, "num_kv_heads": 1, "W_Q": X4[:1] * 4, "W_K": W4, "W_V": W4,
         "b_Q": [0, 0, 0, 0], "b_K": [0, 0], "b_V": [0, 0], "sinks": [0, 0]}

# For each table, valid ways to fill it: each key is tried in the first sample that has it.
SAMPLES: dict[str, list[dict[str, Any]]] = {
    "": [{"title": "t", "description": "d", "mask": "causal", "scale": 2, "tokens": BASE["tokens"], "X": X4,
          "heads": BASE["heads"], "attention": SPLIT, "output": {"W_O": W4}, "context": {"tokens": ["a"], "X": [[1]]},
          "norm": {"kind": "rms"}, "rope": {"layout": "half"}, "alibi": {}, "model": {"source": "glassllm:en"},
          "tiles": {"size": 2}, "cache": {"seed": 1}, "input": {"kind": "residual", "layer": 1},
          "qk_norm": {"over": "head"}, "softcap": 5, "scale_from": "1/d", "gate": {"W_G": W4}}],
    "[[heads]]": [{"name": "h", "W_Q": W4, "W_K": W4, "W_V": W4, "b_Q": [0, 0], "b_K": [0, 0], "b_V": [0, 0],
                   "sink": 0.5, "kv_head": 0, "softcap": 5, "W_G": W4}],
    "[attention]": [{**SPLIT, "softcap": 5}],
    "[output]": [{"W_O": [[1, 0], [0, 1]], "b_O": [0, 0]}],
    "[context]": [{"tokens": ["a"], "X": [[1, 0, 1, 0]]}],
    "[mask]": [{"kind": "padding", "pad": [False, True, False]}, {"kind": "custom", "allow": [[1, 0, 0]] * 3},
               {"kind": "sliding", "window": 2}],
    "[norm]": [{"kind": "layer", "gamma": [1, 1, 1, 1], "beta": [0, 0, 0, 0], "eps": 1e-5}],
    "[qk_norm]": [{"over": "head", "gamma_q": [1, 1], "gamma_k": [1, 1], "eps": 1e-6}],
    "[rope]": [{"layout": "half", "base": 100, "positions": [0, 1, 2], "partial": 1,
                "scaling": {"type": "linear", "factor": 2}}],
    "[alibi]": [{"slopes": [0.5]}],
    "[tiles]": [{"size": 2}],
    "[cache]": [{"block_size": 2, "prefill": 2, "chunk": 1, "seed": 0}],
    "[input]": [{"kind": "residual", "layer": 1, "schedule": ["full", "full"]}],
    "[gate]": [{"W_G": [[1, 0, 1, 0]] * 4}],
    "[mla]": [{"num_heads": 1, "d_nope": 1, "d_rope": 2, "d_v": 1, "W_DKV": W4, "W_UK": [[1], [0]], "W_UV": [[0], [1]],
               "W_KR": W4, "W_Q": [[1, 0, 1]] * 4, "kv_norm": True, "gamma_kv": [1, 1], "eps": 1e-6},
              {"num_heads": 1, "d_nope": 1, "d_rope": 2, "d_v": 1, "W_DKV": W4, "W_UK": [[1], [0]], "W_UV": [[0], [1]],
               "W_KR": W4, "W_DQ": W4, "W_UQ": [[1, 0, 1], [0, 1, 0]], "q_norm": True, "gamma_q": [1, 1]}],
    "[linear]": [{"feature": "elu1", "normalize": True}],
    "[deltanet]": [{"g": [[-0.5]] * 3, "beta": [[1]] * 3},
                   {"W_a": [[0]] * 4, "A_log": [0], "dt_bias": [0], "W_b": [[0]] * 4}],
    "[backward]": [{"target": [[0, 0]] * 3, "lr": 0.1, "steps": 1, "train": ["W_Q"]}, {"dO": [[0, 0]] * 3}],
    "[differential]": [{"lambda_q1": [[0]], "lambda_k1": [[0]], "lambda_q2": [[0]], "lambda_k2": [[0]],
                        "lambda_init": 0.2, "eps": 1e-5, "gamma": [1, 1]},
                       {"lambda_q1": [[0]], "lambda_k1": [[0]], "lambda_q2": [[0]], "lambda_k2": [[0]], "layer": 0}],
    "[value_scale]": [{"factor": 0.5}],
    "[v_norm]": [{"eps": 1e-6}],
    "[ssd]": [{"num_heads": 1, "num_groups": 1, "A": [-1.0], "dt": [[0.5]] * 3, "B": [[1, 0]] * 3,
               "C": [[1, 0]] * 3, "x": [[1, 0]] * 3, "D": [1]}],
    "[shared_kv]": [{"source_layer": 0, "K": [[[1, 0], [0, 1], [1, 1]]], "V": [[[1, 0], [0, 1], [1, 1]]]}],
    "[indexer]": [{"num_heads": 1, "W_q": W4, "W_k": W4, "W_w": [[1]] * 4, "top_k": 2, "rope_dims": 0,
                   "rope_layout": "half", "k_norm": {"gamma": [1, 1], "beta": [0, 0], "eps": 1e-6}}],
}
TABLE_KEY = {"[[heads]]": "heads", "[attention]": "attention", "[output]": "output", "[context]": "context",
             "[mask]": "mask", "[norm]": "norm", "[rope]": "rope", "[alibi]": "alibi", "[tiles]": "tiles",
             "[cache]": "cache", "[input]": "input", "[qk_norm]": "qk_norm", "[gate]": "gate", "[mla]": "mla",
             "[linear]": "linear", "[deltanet]": "deltanet", "[backward]": "backward",
             "[value_scale]": "value_scale", "[differential]": "differential", "[indexer]": "indexer",
             "[v_norm]": "v_norm", "[ssd]": "ssd", "[shared_kv]": "shared_kv"}


def toml(doc: dict[str, Any]) -> str:
    """A document as TOML text; integers past 64 bits are written in hexadecimal, where TOML has no limit."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return hex(v) if v >= 2**64 else str(v)
        if isinstance(v, float):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(item) for item in v) + "]"
        return "{" + ", ".join(f"{k} = {value(item)}" for k, item in v.items()) + "}"

    top = [f"{k} = {value(v)}" for k, v in doc.items() if not isinstance(v, (dict, list)) or
           (isinstance(v, list) and not (v and all(isinstance(t, dict) for t in v)))]
    for k, v in doc.items():
        if isinstance(v, dict):
            top += [f"[{k}]", *(f"{key} = {value(item)}" for key, item in v.items())]
        elif isinstance(v, list) and v and all(isinstance(t, dict) for t in v):
            for table in v:
                top += [f"[[{k}]]", *(f"{key} = {value(item)}" for key, item in table.items())]
    return "\n".join(top) + "\n"


def with_first_item(v: Any) -> Any:
    """``v`` with its first number or flag (at any depth) replaced by BIG; None if it has none."""
    if isinstance(v, list) and v:
        inner = with_first_item(v[0])
        if inner is not None:
            return [inner, *v[1:]]
        return [BIG, *v[1:]] if isinstance(v[0], (int, float, str)) else None
    return None


def cases() -> list[tuple[str, str, dict[str, Any]]]:
    found = []
    for table, keys in key_tables().items():
        for key in keys:
            sample = next((s for s in SAMPLES[table] if key in s), SAMPLES[table][0])
            variants: list[tuple[str, Any]] = [("whole", BIG)]
            item = with_first_item(sample.get(key))
            if item is not None:
                variants.append(("item", item))
            for how, new in variants:
                if table == "":
                    doc = {"model": new} if key == "model" else {**BASE, key: new}
                    if key == "attention":
                        doc.pop("heads")
                else:
                    name = TABLE_KEY[table]
                    filled = {**sample, key: new}
                    doc = {**BASE, name: [filled] if table == "[[heads]]" else filled}
                    if table in ("[attention]", "[mla]"):
                        doc.pop("heads")
                    if table in ("[alibi]", "[linear]", "[deltanet]", "[ssd]"):
                        doc["mask"] = "causal"
                    if table == "[shared_kv]":  # its heads have W_Q alone: K and V are another layer's
                        doc["heads"] = [{"W_Q": W4}]
                found.append((f"{table or 'top'} {key} ({how})", key, doc))
    for key, new in (("layer", BIG), ("heads", [BIG]), ("heads", BIG), ("text", BIG), ("source", BIG)):
        model = {"source": "glassllm:en", "text": "Alice was", key: new}
        found.append((f"[model] {key} ({type(new).__name__})", key, {"model": model}))
    return found


CASES = cases()


@pytest.mark.parametrize("name", [name for name, _, _ in CASES])
def test_a_5000_digit_integer_is_one_clean_line(name: str, cli, write) -> None:
    _, key, doc = next(case for case in CASES if case[0] == name)
    if "[model]" in name:
        pytest.importorskip("glassllm", reason="the models extra is not installed")
    path = write(toml(doc))
    run = cli("--check", str(path))
    assert (run.code, run.out) == (2, ""), (run.out, run.err[-300:])
    lines = run.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), run.err[-300:]
    assert not re.search(r"\d{80}", lines[0]) and len(lines[0]) < 400, lines[0]
    assert key in lines[0], lines[0]  # the message is about the key tried, not another mistake


def test_every_table_and_key_is_tried() -> None:
    """The cases cover the loader's whole key list, including the integer keys the issue named."""
    tried = {key for _, key, _ in CASES}
    assert tried >= {key for keys in key_tables().values() for key in keys}
    assert tried >= {"window", "num_kv_heads", "num_heads", "kv_head", "positions", "pad", "allow", "layer", "heads",
                     "size", "block_size", "prefill", "chunk", "seed"}


def test_a_long_integer_formats_as_its_description_everywhere() -> None:
    doc = tame({"a": BIG, "b": [1, [2, -BIG]], "c": {"d": [{"e": BIG}]}, "f": 2**255, "g": True})
    wrapped = [doc["a"], doc["b"][1][1], doc["c"]["d"][0]["e"]]
    assert all(type(v) is LongInt for v in wrapped) and type(doc["f"]) is int and doc["g"] is True
    big = doc["a"]
    assert big == BIG and big > 2**53 and float(BIG // big) == 1.0  # still the number
    described = "an integer of about 5,000 digits"
    assert str(big) == repr(big) == f"{big}" == f"{big:,}" == f"{big:d}" == show(big) == described
    assert f"{big:>40}" == described.rjust(40) and str([big]) == f"[{described}]"
    assert show(-BIG) == described and str(doc["b"][1][1]) == described


@pytest.mark.parametrize("literal", ["0b1" + "_0" * 256, "0o" + "7" * 86, "0x1" + "0" * 64, "2" + "0" * 77, "-" + "9" * 78])
def test_the_reader_wraps_every_integer_past_256_bits(literal: str) -> None:
    from qkv_tui.core.tomlfile import parse_toml

    doc = parse_toml(f"a = {literal}\nb = [[1, {literal}]]\nc = 0x{'f' * 64}\n")
    assert type(doc["a"]) is LongInt and type(doc["b"][0][1]) is LongInt and doc["a"] == doc["b"][0][1]
    assert type(doc["c"]) is int and doc["c"] == 2**256 - 1  # 256 bits: printed as it is


def test_a_model_folder_with_a_5000_digit_integer_is_one_clean_line(cli, write, tmp_path) -> None:
    """json.loads, like int(), refuses an integer past 4,300 digits: a ValueError that is not a JSONDecodeError."""
    import struct

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "config.json").write_text('{"model_type": "llama", "num_attention_heads": ' + "9" * 5000 + "}")
    path = write(f'[model]\nsource = "{folder}"\ntext = "a"\n')
    run = cli("--check", str(path))
    assert run.code == 2 and run.err.count("\n") == 1, run.err[-300:]
    assert "config.json: holds an integer of more than 4,300 digits" in run.err

    from qkv_tui.importers import ImporterError
    from qkv_tui.importers.safetensors_raw import TensorFiles

    header = ('{"w": {"dtype": "F32", "shape": [' + "9" * 5000 + '], "data_offsets": [0, 4]}}').encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    with pytest.raises(ImporterError, match="not a safetensors file"):
        TensorFiles([folder / "model.safetensors"])
