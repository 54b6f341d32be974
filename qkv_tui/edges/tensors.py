"""A learner's own arrays (``--tensors FILE``, ``--compare FILE``): read from .npz, .safetensors or .pt and
turned into the plain scenario data a file would hold, or into the learner's results stage by stage.

Every malformed file is one TensorError line naming the array, its shape and what was expected; the
command line prints it as ``error:`` and exits 2. Conventions (docs/my-attention-is-wrong.md): weights as
``nn.Linear`` stores them (out × in, ``--layout torch``) or as x·W (in × out, ``--layout math``); leading
axes of Q/K/V read as (batch, heads, tokens, d), of X as (batch, tokens, d_model); ``--batch N`` (from 0)
picks one sequence of a batch.
"""

from __future__ import annotations

import math
import pickle
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from qkv_tui.base.values import escaped

AnyArray = npt.NDArray[Any]
Matrix = npt.NDArray[np.float64]

INPUT_NAMES = ("X", "W_Q", "W_K", "W_V", "W_O", "mask", "Q", "K", "V", "num_heads", "rope_theta", "dO")
RESULT_NAMES = {"scores": "scores", "scaled": "scaled", "weights": "weights", "attn": "weights",
                "output": "output", "out": "output", "dQ": "dQ", "dK": "dK", "dV": "dV", "dS": "dS", "dP": "dP"}
GRADIENT_NAMES = ("dQ", "dK", "dV", "dS", "dP")
# About 45 bytes a cell once every stage and its trace is kept: 2**26 cells is ~3 GB, a 2,048-token layer
# of 16 heads; a file past it would be killed for memory (or swap for minutes) instead of being told.
MAX_CELLS = 2**26
MAX_ARRAY_BYTES = 2**31  # one array of a file: a 2,048-token layer's weights are far below it
MASKED_AT_MOST = -1e4  # an additive mask's "never attend" (−1e9, finfo.min): anything this low counts as −∞
SAVE_NPZ = ("save the arrays as .npz instead: numpy.savez('mine.npz', X=X.numpy(), W_Q=W_Q.numpy(), ...)"
            " (tensor.detach().numpy() for each)")


class TensorError(ValueError):
    """A learner's file that cannot be read as the page says; ``str()`` is one line."""


@dataclass
class Stored:
    """The arrays of one file, by name, with the dtype each was saved in."""

    path: Path
    arrays: dict[str, AnyArray]
    dtypes: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return escaped(self.path.name)


def _dims(shape: tuple[int, ...]) -> str:
    return "a single number" if not shape else "×".join(map(str, shape))


def read_arrays(path: Path) -> Stored:
    """Every array in the file, float ones as float64 (bool and whole-number arrays kept as they are)."""
    from qkv_tui.importers.errors import ImporterError
    from qkv_tui.importers.files import check_regular

    shown = escaped(path.name)
    try:
        check_regular(path, "a .npz, .safetensors or .pt file of arrays")
    except ImporterError as exc:
        raise TensorError(str(exc)) from None
    suffix = path.suffix.lower()
    if suffix == ".npz":
        raw = _read_npz(path)
    elif suffix == ".safetensors":
        raw = _read_safetensors(path)
    elif suffix in (".pt", ".pth"):
        raw = _read_torch(path)
    else:
        raise TensorError(f"{shown}: expected a .npz, .safetensors or .pt/.pth file of arrays, not {suffix or 'no extension'}")
    stored = Stored(path, {})
    for name, array in raw.items():
        stored.dtypes[name] = str(array.dtype)
        if array.dtype.kind == "f":
            stored.arrays[name] = array.astype(np.float64)
        elif array.dtype.kind in "biu":
            stored.arrays[name] = np.asarray(array)
        else:
            raise TensorError(f"{shown}: {name} holds {array.dtype} values; expected numbers")
    return stored


def _read_npz(path: Path) -> dict[str, AnyArray]:
    if not zipfile.is_zipfile(path):  # np.load would try it as a pickle and speak of allow_pickle
        raise TensorError(f"{escaped(path.name)}: not a readable .npz file (not a zip archive); expected"
                          " numpy.savez's output")
    try:
        _check_npz_sizes(path)
        with np.load(path, allow_pickle=False) as bundle:
            return {name: np.asarray(bundle[name]) for name in bundle.files}
    except MemoryError:
        raise TensorError(f"{escaped(path.name)}: its arrays do not fit in this machine's memory; expected at most"
                          f" {MAX_ARRAY_BYTES // 2**30} GiB an array") from None
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise TensorError(f"{escaped(path.name)}: not a readable .npz file ({exc}); expected numpy.savez's output") from None
    except TensorError:
        raise
    except ValueError as exc:  # an object array (pickled), which allow_pickle=False refuses
        raise TensorError(f"{escaped(path.name)}: {exc}; expected plain number arrays") from None


def _check_npz_sizes(path: Path) -> None:
    """Each member's size as its header declares it, before np.load allocates that much: a header may claim
    100000×100000 over 64 bytes of data (a damaged or hostile file), or a compressed file may unpack to
    more than the machine holds; either was a MemoryError traceback."""
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if not info.filename.endswith(".npy"):
                continue
            name = escaped(info.filename[:-4])
            with archive.open(info) as member:
                try:
                    version = np.lib.format.read_magic(member)
                    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                    shape, _fortran, dtype = read(member)
                except (ValueError, UnicodeDecodeError):
                    continue  # np.load says what is wrong with a header it cannot read
                header = member.tell()
            if dtype.hasobject:
                continue  # refused by allow_pickle=False, with its own line
            declared = math.prod(shape) * dtype.itemsize
            if declared > MAX_ARRAY_BYTES:
                raise TensorError(f"{escaped(path.name)}: {name} is {_dims(tuple(shape))} of {dtype}, {declared:,} bytes;"
                                  f" expected at most {MAX_ARRAY_BYTES // 2**30} GiB an array")
            if declared > info.file_size - header:
                raise TensorError(f"{escaped(path.name)}: {name}'s header says {_dims(tuple(shape))} of {dtype}"
                                  f" ({declared:,} bytes) but it holds {info.file_size - header:,}; the file is damaged")


_INTS = {"BOOL": "?", "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2", "I32": "<i4", "U32": "<u4", "I64": "<i8",
         "U64": "<u8"}


def _read_safetensors(path: Path) -> dict[str, AnyArray]:
    from qkv_tui.importers.errors import ImporterError
    from qkv_tui.importers.safetensors_raw import TensorFiles

    try:
        files = TensorFiles([path])
        out: dict[str, AnyArray] = {}
        for name, entry in files.entries.items():
            if entry.dtype in _INTS:  # a mask saved as bool or 0/1: the raw reader takes floats only
                data = path.read_bytes()[entry.start:entry.end]
                out[name] = np.frombuffer(data, dtype=_INTS[entry.dtype]).reshape(entry.shape)
            else:
                array = files.get(name, entry.shape)
                out[name] = array.astype(np.float32) if entry.dtype in ("F32", "F16", "BF16") else array
        return out
    except ImporterError as exc:
        raise TensorError(str(exc)) from None


def _read_torch(path: Path) -> dict[str, AnyArray]:
    shown = escaped(path.name)
    try:
        import torch
    except ImportError:
        raise TensorError(f"{shown}: reading .pt needs PyTorch, which is not installed; {SAVE_NPZ}") from None
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        if found is None:  # not a pickle PyTorch can read at all
            raise TensorError(f"{shown}: not a readable PyTorch file; expected torch.save of a dict of tensors") from None
        raise TensorError(f"{shown}: refused: it holds a {escaped(found.group(1)[-80:])}, not only tensors, and"
                          f" only tensors are loaded (weights_only=True: an unknown pickle can run code); {SAVE_NPZ}"
                          ) from None
    except Exception as exc:  # torch raises RuntimeError, EOFError and others for a file that is not its format
        raise TensorError(f"{shown}: not a readable PyTorch file ({type(exc).__name__}); expected torch.save of a"
                          " dict of tensors") from None
    if not isinstance(loaded, dict):
        raise TensorError(f"{shown}: holds a {type(loaded).__name__}; expected torch.save of a dict of tensors,"
                          " e.g. torch.save({'X': X, 'W_Q': W_Q, ...}, 'mine.pt')")
    out: dict[str, AnyArray] = {}
    for name, value in loaded.items():
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu()
            if tensor.dtype in (torch.bfloat16, torch.float16):
                tensor = tensor.float()
            out[str(name)] = tensor.numpy()
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[str(name)] = np.asarray(value)
    return out


# --- the inputs: a scenario -------------------------------------------------------


@dataclass
class Reading:
    """What ``--tensors`` made of a file: the scenario's data and how the learner's axes map onto it."""

    doc: dict[str, Any]
    heads: int
    batch: int | None  # the batch size the inputs had; None: no batch axis
    direct: bool  # Q, K, V given directly (no weights)
    per_head_weights: bool  # weights with a leading head axis, not one wide matrix each
    dtype: str  # the learner's float dtype ("float32" or "float64"): where an unstable softmax overflows
    note: str = ""  # how an input was read other than as given (one line), for standard error and the report


def _want(stored: Stored, name: str, ndims: tuple[int, ...], what: str) -> AnyArray:
    array = stored.arrays[name]
    if array.ndim not in ndims:
        raise TensorError(f"{stored.name}: {name} is {_dims(array.shape)} ({array.ndim}-D); expected {what}")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])
        raise TensorError(f"{stored.name}: {name} holds {array[where]} at index {list(where)}; expected finite"
                          " numbers in the inputs")
    if array.size == 0:
        raise TensorError(f"{stored.name}: {name} is {_dims(array.shape)}, which is empty; expected numbers")
    return array.astype(np.float64) if array.dtype.kind != "f" else array


def _pick(stored: Stored, name: str, array: AnyArray, batch: int | None, size: int) -> AnyArray:
    if batch is None:
        return array
    if not 0 <= batch < size:
        raise TensorError(f"{stored.name}: --batch {batch} is out of range: {name} is {_dims(array.shape)}, a batch of"
                          f" {size} (--batch counts from 0: 0 … {size - 1})")
    picked: AnyArray = array[batch]
    return picked


def _scalar(stored: Stored, name: str, whole: bool) -> float | None:
    if name not in stored.arrays:
        return None
    array = stored.arrays[name]
    if array.size != 1:
        raise TensorError(f"{stored.name}: {name} is {_dims(array.shape)}; expected a single number")
    value = float(array.reshape(-1)[0])
    if not math.isfinite(value) or value <= 0 or (whole and value != int(value)):
        raise TensorError(f"{stored.name}: {name} is {value:g}; expected a {'whole ' if whole else ''}number > 0")
    return value


def read_inputs(stored: Stored, layout: str | None, batch: int | None) -> Reading:
    """The scenario data for the file's inputs; raises TensorError."""
    names = stored.arrays
    has_w = all(n in names for n in ("X", "W_Q", "W_K", "W_V"))
    has_qkv = all(n in names for n in ("Q", "K", "V"))
    if not has_w and not has_qkv:
        found = ", ".join(escaped(n) for n in names) or "none"
        raise TensorError(f"{stored.name}: expected X with W_Q, W_K and W_V, or Q, K and V (found: {found})")
    theta = _scalar(stored, "rope_theta", whole=False)
    if has_w:
        reading, allow_n = _from_weights(stored, layout, batch)
    else:
        reading, allow_n = _from_qkv(stored, batch)
    n, m = allow_n
    if reading.heads * n * m > MAX_CELLS:
        raise TensorError(f"{stored.name}: {n:,} queries × {m:,} keys × {reading.heads} head(s) is"
                          f" {reading.heads * n * m:,} attention cells, each kept with its arithmetic; expected at"
                          f" most {MAX_CELLS:,} (take fewer tokens: the mistakes show on a short sequence)")
    mask = _mask(stored, n, m, reading.batch, batch)
    if mask is not None:
        if n == m and np.array_equal(mask, np.tril(np.ones((n, n), dtype=bool))):
            reading.doc["mask"] = "causal"
        elif n == m and n > 1 and np.array_equal(mask, np.tril(np.ones((n, n), dtype=bool), 1)):
            # A learner saves the causal mask their own function built; taken as given, an off-by-one mask
            # would be the right answer to itself and the check would say "agree" to the mistake it names.
            reading.doc["mask"] = "causal"
            reading.note = "your mask is tril(ones, diagonal=1), one key ahead: read as causal, tril(ones)"
        elif not mask.all():
            if n == m and np.array_equal(mask, np.triu(np.ones((n, n), dtype=bool), 1)):
                # nn.Transformer's and many tutorials' convention (True = masked out), read as True = attend,
                # leaves the last query no key: say which convention, not only which row
                raise TensorError(f"{stored.name}: mask is triu(ones, diagonal=1), the causal mask with True ="
                                  " masked out; expected True = attend: save ~mask (or torch.tril(ones))")
            for i in range(n):
                if not mask[i].any():
                    raise TensorError(f"{stored.name}: mask row {i} lets query {i} attend no key; expected every query"
                                      " to keep at least one key (True = attend)")
            reading.doc["mask"] = {"kind": "custom", "allow": mask.astype(np.int64).tolist()}
    if "dO" in stored.arrays:
        reading.doc["backward"] = {"dO": _upstream(stored, reading, batch)}
    if theta is not None:
        if "context" in reading.doc:
            raise TensorError(f"{stored.name}: rope_theta with Q and K of different lengths; expected one sequence")
        reading.doc["rope"] = {"layout": "interleaved", "base": theta, "positions": list(range(n))}
    return reading


def _upstream(stored: Stored, reading: Reading, batch: int | None) -> Matrix:
    """dO, the gradient of the final output (a backward pass's upstream): tokens × d_out, after any batch axis."""
    dO = _want(stored, "dO", (2, 3), "tokens × d_out (the gradient of your output), or batch × tokens × d_out")
    if dO.ndim == 3:
        if reading.batch is None or dO.shape[0] != reading.batch:
            raise TensorError(f"{stored.name}: dO is {_dims(dO.shape)}; expected tokens × d_out, with a batch axis only"
                              " where the inputs have one")
        dO = _pick(stored, "dO", dO, 0 if batch is None else batch, reading.batch)
    n = len(reading.doc["tokens"])
    if "output" in reading.doc:
        d_out = reading.doc["output"]["W_O"].shape[1]
    elif "attention" in reading.doc:
        d_out = reading.doc["attention"]["W_V"].shape[1]
    else:
        d_out = sum(head["W_V"].shape[1] for head in reading.doc["heads"])
    if dO.shape != (n, d_out):
        raise TensorError(f"{stored.name}: dO is {_dims(stored.arrays['dO'].shape)}; expected {n} × {d_out} (tokens ×"
                          " d_out: the shape of your output)")
    return dO


def _layout(stored: Stored, layout: str | None, d_in: dict[str, int]) -> str:
    """torch or math: given, or the one reading the weights' shapes allow."""
    if layout is not None:
        return layout
    fits: dict[str, set[str]] = {}
    for name, rows_in in d_in.items():
        shape = stored.arrays[name].shape[-2:]
        fits[name] = {way for way, axis in (("math", 0), ("torch", 1)) if shape[axis] == rows_in}
    ways = set.intersection(*fits.values()) if fits else set()
    decided = {w for f in fits.values() if len(f) == 1 for w in f}
    if len(decided) == 1:
        return decided.pop()
    if not ways:
        return "math"  # neither reading fits; the shape check below names the array
    name = next(iter(d_in))
    return _ask_layout(stored, name)


def _ask_layout(stored: Stored, name: str) -> str:
    shape = stored.arrays[name].shape
    raise TensorError(f"{stored.name}: {name} is {_dims(shape)}, which reads both as nn.Linear stores a weight (out × in)"
                      " and as x·W (in × out); say which with --layout torch or --layout math")


def _from_weights(stored: Stored, layout: str | None, batch: int | None) -> tuple[Reading, tuple[int, int]]:
    X = _want(stored, "X", (2, 3), "tokens × d_model, or batch × tokens × d_model")
    b_size = None
    if X.ndim == 3:
        b_size = X.shape[0]
        X = _pick(stored, "X", X, 0 if batch is None else batch, X.shape[0])
    elif batch is not None:
        raise TensorError(f"{stored.name}: --batch {batch} given, but X is {_dims(X.shape)}: no batch axis")
    n, d_model = X.shape
    weights = {name: _want(stored, name, (2, 3), "2-D (a weight) or 3-D (heads × a head's weight)")
               for name in ("W_Q", "W_K", "W_V")}
    per_head = {w.ndim for w in weights.values()}
    if len(per_head) != 1:
        raise TensorError(f"{stored.name}: W_Q is {_dims(weights['W_Q'].shape)}, W_K {_dims(weights['W_K'].shape)},"
                          f" W_V {_dims(weights['W_V'].shape)}; expected all 2-D or all 3-D (heads first)")
    three = per_head == {3}
    W_O = _want(stored, "W_O", (2,), "a 2-D weight") if "W_O" in stored.arrays else None
    d_in = {name: d_model for name in weights}
    way = _layout(stored, layout, d_in)
    math_w = {name: (w if way == "math" else np.swapaxes(w, -1, -2)) for name, w in weights.items()}
    for name, w in math_w.items():
        if w.shape[-2] != d_model:
            expected = ("d_model × width (x·W)" if way == "math" else "width × d_model (nn.Linear's out × in)")
            if layout is None:
                expected = f"{d_model} on one side: width × {d_model} (nn.Linear's out × in) or {d_model} × width (x·W)"
                raise TensorError(f"{stored.name}: {name} is {_dims(stored.arrays[name].shape)}; with X of d_model"
                                  f" {d_model}, expected {'heads × ' if three else ''}{expected}")
            raise TensorError(f"{stored.name}: {name} is {_dims(stored.arrays[name].shape)}; with X of d_model"
                              f" {d_model}, expected {'heads × ' if three else ''}{expected} (--layout {way})")
    if three:
        heads = {w.shape[0] for w in math_w.values()}
        if len(heads) != 1:
            raise TensorError(f"{stored.name}: W_Q, W_K, W_V have {sorted(heads)} heads on their first axis; expected"
                              " the same number")
        H = heads.pop()
        wide = {name: np.concatenate(list(w), axis=1) for name, w in math_w.items()}
    else:
        wide = math_w
        H = int(_scalar(stored, "num_heads", whole=True) or 1)
    if wide["W_Q"].shape[1] != wide["W_K"].shape[1]:
        raise TensorError(f"{stored.name}: W_Q is {_dims(stored.arrays['W_Q'].shape)} and W_K"
                          f" {_dims(stored.arrays['W_K'].shape)}; expected the same width d_k (Q·Kᵀ needs it)")
    for name, w in wide.items():
        if w.shape[1] % H:
            raise TensorError(f"{stored.name}: {name} is {_dims(stored.arrays[name].shape)}; its width {w.shape[1]}"
                              f" does not split into num_heads = {H} equal heads")
    doc: dict[str, Any] = {"title": escaped(stored.path.stem), "tokens": [f"t{i}" for i in range(n)], "X": X,
                           "attention": {"num_heads": H, **wide}}
    if W_O is not None:
        out_w = W_O if way == "math" else W_O.T
        d_v_all = wide["W_V"].shape[1]
        if out_w.shape[0] != d_v_all:
            expected = f"{d_v_all} × d_out (x·W)" if way == "math" else f"d_out × {d_v_all} (nn.Linear's out × in)"
            raise TensorError(f"{stored.name}: W_O is {_dims(W_O.shape)}; with W_V's {d_v_all} output columns in all,"
                              f" expected {expected} (--layout {way})")
        doc["output"] = {"W_O": out_w}
    dtype = _float_dtype(stored, ("X", "W_Q"))
    return Reading(doc, H, b_size, False, three, dtype), (n, n)


def _from_qkv(stored: Stored, batch: int | None) -> tuple[Reading, tuple[int, int]]:
    arrays = {name: _want(stored, name, (2, 3, 4), "tokens × d, batch × tokens × d, or batch × heads × tokens × d")
              for name in ("Q", "K", "V")}
    ranks = {a.ndim for a in arrays.values()}
    if len(ranks) != 1:
        raise TensorError(f"{stored.name}: Q is {_dims(arrays['Q'].shape)}, K {_dims(arrays['K'].shape)}, V"
                          f" {_dims(arrays['V'].shape)}; expected the same number of axes")
    rank = ranks.pop()
    b_size = None
    if rank >= 3:
        sizes = {a.shape[0] for a in arrays.values()}
        if len(sizes) != 1:
            raise TensorError(f"{stored.name}: Q, K and V have batch sizes {sorted(sizes)}; expected the same")
        b_size = sizes.pop()
        arrays = {k: _pick(stored, k, a, 0 if batch is None else batch, b_size) for k, a in arrays.items()}
    elif batch is not None:
        raise TensorError(f"{stored.name}: --batch {batch} given, but Q is {_dims(arrays['Q'].shape)}: no batch axis")
    per_head = {k: (list(a) if a.ndim == 3 else [a]) for k, a in arrays.items()}
    H = len(per_head["Q"])
    if len(per_head["K"]) != H or len(per_head["V"]) != H:
        raise TensorError(f"{stored.name}: Q has {H} heads, K {len(per_head['K'])}, V {len(per_head['V'])}; expected"
                          " the same number (axis 1 of batch × heads × tokens × d)")
    Q0, K0, V0 = per_head["Q"][0], per_head["K"][0], per_head["V"][0]
    n, d_k = Q0.shape
    m, d_v = V0.shape
    if K0.shape != (m, d_k):
        raise TensorError(f"{stored.name}: K is {_dims(stored.arrays['K'].shape)}; expected {m} keys (V's tokens) of"
                          f" d_k {d_k} (Q's width)")
    # Q, K and V enter as X (their columns side by side) times 0/1 selectors: the products are exact, and the
    # rest of the app runs the one scenario form it knows
    if n == m:
        X = np.concatenate(per_head["Q"] + per_head["K"] + per_head["V"], axis=1)
        offsets = (0, H * d_k, 2 * H * d_k)
        X_kv = None
    else:
        X = np.concatenate(per_head["Q"], axis=1)
        X_kv = np.concatenate(per_head["K"] + per_head["V"], axis=1)
        offsets = (0, 0, H * d_k)
    rows_q, rows_kv = X.shape[1], (X if X_kv is None else X_kv).shape[1]
    heads = []
    for h in range(H):
        heads.append({"W_Q": _selector(rows_q, offsets[0] + h * d_k, d_k),
                      "W_K": _selector(rows_kv, offsets[1] + h * d_k, d_k),
                      "W_V": _selector(rows_kv, offsets[2] + h * d_v, d_v)})
    doc: dict[str, Any] = {"title": escaped(stored.path.stem), "tokens": [f"t{i}" for i in range(n)], "X": X,
                           "heads": heads}
    if X_kv is not None:
        doc["context"] = {"tokens": [f"k{j}" for j in range(m)], "X": X_kv}
    if "W_O" in stored.arrays:
        W_O = _want(stored, "W_O", (2,), "a 2-D weight")
        if W_O.shape[0] != H * d_v:
            raise TensorError(f"{stored.name}: W_O is {_dims(W_O.shape)}; with Q, K, V given directly it is read as x·W,"
                              f" expected {H * d_v} × d_out")
        doc["output"] = {"W_O": W_O}
    return Reading(doc, H, b_size, True, True, _float_dtype(stored, ("Q",))), (n, m)


def _selector(rows: int, start: int, width: int) -> Matrix:
    sel = np.zeros((rows, width))
    sel[np.arange(start, start + width), np.arange(width)] = 1.0
    return sel


def _float_dtype(stored: Stored, names: tuple[str, ...]) -> str:
    for name in names:
        if stored.dtypes.get(name, "").startswith("float"):
            return "float32" if stored.dtypes[name] in ("float32", "float16", "bfloat16") else "float64"
    return "float64"


def _mask(stored: Stored, n: int, m: int, b_size: int | None, batch: int | None) -> npt.NDArray[np.bool_] | None:
    if "mask" not in stored.arrays:
        return None
    raw = stored.arrays["mask"]
    if raw.ndim < 2 or raw.shape[-2:] != (n, m):
        raise TensorError(f"{stored.name}: mask is {_dims(raw.shape)}; expected {n} × {m} (queries × keys), with any"
                          " leading batch or head axes")
    lead = raw
    if lead.ndim > 2 and b_size is not None and b_size > 1 and lead.shape[0] == b_size:
        lead = lead[0 if batch is None else batch]
    while lead.ndim > 2:
        first = lead[0]
        if not all(np.array_equal(first, other) for other in lead[1:]):
            raise TensorError(f"{stored.name}: mask is {_dims(raw.shape)} and differs between heads or batch items;"
                              f" expected one {n} × {m} mask (or the same one repeated)")
        lead = first
    if lead.dtype == np.bool_:
        return np.asarray(lead, dtype=bool)
    values = np.asarray(lead, dtype=np.float64)
    if raw.dtype.kind in "iu":
        if not np.isin(values, (0, 1)).all():
            raise TensorError(f"{stored.name}: mask holds whole numbers other than 0 and 1; expected booleans"
                              " (True = attend), 0/1, or an additive mask of 0 and −inf")
        return np.asarray(values == 1, dtype=bool)
    blocked = values <= MASKED_AT_MOST
    if not ((values == 0) | blocked).all() or np.isnan(values).any():
        bad = tuple(int(i) for i in np.argwhere(~((values == 0) | blocked))[0])
        raise TensorError(f"{stored.name}: mask holds {values[bad]:g} at {list(bad)}; expected booleans (True = attend)"
                          " or an additive mask of 0 (attend) and −inf (or ≤ −1e4: never attend)")
    return ~blocked


# --- the learner's results ---------------------------------------------------------------


@dataclass
class Results:
    """The learner's intermediates with one head axis each: scores/scaled/weights (H, n, m), output per head
    (H, n, d_v) where given so, or the final output (n, d_out)."""

    stages: dict[str, Matrix]  # "scores", "scaled", "weights", "mix" → (H, ...)
    final: Matrix | None  # (n, d_out): after W_O, or the heads' concatenation
    dtype: str


def results_named(stored: Stored) -> dict[str, tuple[str, AnyArray]]:
    """The learner's results by stage key (their name, the array); raises TensorError where there are
    none, which the command line checks before computing: a long sequence takes a while to compute."""
    found: dict[str, tuple[str, AnyArray]] = {}
    for name, key in RESULT_NAMES.items():
        if name in stored.arrays:
            if key in found:
                raise TensorError(f"{stored.name}: both {found[key][0]} and {name} given; expected one of them")
            found[key] = (name, stored.arrays[name])
    if not found:
        raise TensorError(f"{stored.name}: no results to compare; expected one or more of scores, scaled, weights"
                          " (or attn), output (or out), and with dO: dQ, dK, dV, dS, dP")
    return found


def read_results(stored: Stored, heads: int, batch_size: int | None, batch: int | None,
                 shapes: dict[str, tuple[int, ...]]) -> Results:
    """``shapes``: each stage's right shape for one head, and "final"'s; a learner's array of another
    shape is bad input, named with what was expected."""
    found = results_named(stored)
    grads = [name for name in GRADIENT_NAMES if name in found]
    if grads and "dQ" not in shapes:
        raise TensorError(f"{stored.name}: {grads[0]} given, but there is no backward pass to compare it with; expected"
                          " dO (the gradient of your output) in the --tensors file, or a scenario with [backward]")
    stages: dict[str, Matrix] = {}
    final = None
    dtype = "float64"
    for key, (name, array) in found.items():
        if stored.dtypes.get(name) in ("float32", "float16", "bfloat16"):
            dtype = "float32"
        array = array.astype(np.float64)
        base = shapes["mix" if key == "output" else key]
        lead = _strip_batch(stored, name, array, batch_size, batch, len(base), heads == 1 or key == "output")
        if key == "output":
            if lead.ndim == 2:  # (tokens, d): the final output (one head without W_O: its Mix)
                if lead.shape != shapes["final"]:
                    raise TensorError(f"{stored.name}: {name} is {_dims(array.shape)}; expected the output"
                                      f" {' × '.join(map(str, shapes['final']))} (tokens × d_out)")
                final = lead
                continue
            key = "mix"
            base = shapes["mix"]
        if lead.shape == base and heads == 1:
            lead = lead[None]
        expect = (heads, *base)
        if lead.shape != expect:
            shown = " × ".join(map(str, expect[1:] if heads == 1 else expect))
            extra = f", or the final output {' × '.join(map(str, shapes['final']))}" if key == "mix" else ""
            raise TensorError(f"{stored.name}: {name} is {_dims(array.shape)}; expected {shown}{extra}"
                              f"{' (heads first)' if heads > 1 else ''}, after any batch axis")
        stages[key] = lead
    return Results(stages, final, dtype)


def _strip_batch(stored: Stored, name: str, array: AnyArray, batch_size: int | None, batch: int | None,
                 base_rank: int, one_head: bool) -> AnyArray:
    """The one sequence --batch picks, where the array has a batch axis: (batch, heads, …) always does,
    (batch, …) where there is no head axis to mistake it for (one head, or the final output)."""
    if batch_size is None:
        return array
    if array.ndim == base_rank + 2 or (array.ndim == base_rank + 1 and one_head):
        if array.shape[0] != batch_size:
            raise TensorError(f"{stored.name}: {name} is {_dims(array.shape)}; the inputs have a batch of {batch_size},"
                              " expected it first")
        return _pick(stored, name, array, 0 if batch is None else batch, batch_size)
    return array
