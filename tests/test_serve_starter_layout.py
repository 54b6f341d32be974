"""The --serve app starter's memory laid out before it forks (edges/serve/compact.py): the code a first
frame runs copied into pages of its own, each function running its copy as it ran the original; the
free blocks between the starter's objects filled, so that a forked app's new objects do not land on
its pages; the second warm-up that specialises the copies keeps nothing and records nothing."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from qkv_tui.edges.serve import compact, zygote
from qkv_tui.edges.serve import prepared as serve_prepared

ROOT = Path(__file__).resolve().parent.parent


def doubled_odd(numbers: list[int]) -> list[int]:
    return [2 * n for n in numbers if n % 2]


def scaled(factor: int) -> types.FunctionType:
    def scale(x: int) -> int:
        return factor * x

    return scale  # type: ignore[return-value]


def never_called() -> int:
    return 1


def inner_codes(code: types.CodeType) -> list[types.CodeType]:
    return [const for const in code.co_consts if isinstance(const, types.CodeType)]


def test_a_function_that_ran_runs_a_copy_of_its_code_with_the_same_results() -> None:
    originals = {f: f.__code__ for f in (doubled_odd, scaled, never_called)}
    called: dict[int, types.CodeType] = {}
    with compact.calls(called):
        assert doubled_odd([1, 2, 3]) == [2, 6]
        assert scaled(3)(4) == 12
    assert id(originals[doubled_odd]) in called and id(originals[scaled]) in called
    copies = compact.pack_code(called)
    for function in (doubled_odd, scaled):
        copy = function.__code__
        assert copy is not originals[function] and copy is copies[id(originals[function])]
        assert copy.co_code == originals[function].co_code  # the same instructions, names and constants
        assert copy.co_qualname == originals[function].co_qualname and copy.co_names == originals[function].co_names
    assert never_called.__code__ is originals[never_called]  # what did not run keeps its code
    # a comprehension or a nested def that ran is copied into its maker's copy: what it makes runs the copy
    for function in (doubled_odd, scaled):
        (made_before,) = inner_codes(originals[function])
        (made_now,) = inner_codes(function.__code__)
        assert made_now is not made_before and made_now.co_code == made_before.co_code
    assert scaled(5).__code__ is inner_codes(scaled.__code__)[0]
    assert doubled_odd([5, 6, 7]) == [10, 14] and scaled(5)(6) == 30 and never_called() == 1


def test_nothing_is_recorded_outside_the_block_or_after_it() -> None:
    called: dict[int, types.CodeType] = {}
    never_called()
    with compact.calls(called):
        pass
    doubled_odd([1])
    assert id(never_called.__code__) not in called and id(doubled_odd.__code__) not in called
    assert sys.getprofile() is None


def test_a_second_warm_up_keeps_no_scenario_and_records_no_code() -> None:
    serve_prepared.keep(None)
    try:
        assert zygote.warm_up(["i_love_ai"], first=False) == {}
        assert serve_prepared.take("i_love_ai") is None
        called = zygote.warm_up(["i_love_ai"])
        assert called  # the first frame's code
        assert serve_prepared.take("i_love_ai") is not None
    finally:
        serve_prepared.keep(None)


# In a Python of its own: the starter's warm-up, then the layout, as zygote.preload does it.
LAID_OUT = """
import gc, json
from qkv_tui.edges.serve import compact, zygote
called = zygote.warm_up(["i_love_ai"])
gc.collect()
free_before = compact._pymalloc_free_blocks()
compact.fill_free_blocks()
free_after = compact._pymalloc_free_blocks()
libc = compact._libc()
chunks = [] if libc is None else [c for c in compact._malloc_free_chunks(libc) if c[0] < compact.LARGEST_HOLE]
pages = lambda codes: len({id(code) >> 12 for code in codes})
copies = compact.pack_code(called)
print(json.dumps({"free_before": free_before, "free_after": free_after, "glibc": libc is not None, "chunks": chunks,
                  "code_pages_before": pages(called.values()), "code_pages_after": pages(copies.values()),
                  "codes": len(called)}))
"""


@pytest.fixture(scope="module")
def laid_out() -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", LAID_OUT], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return found


def test_the_first_frames_code_lies_on_far_fewer_pages_once_packed(laid_out: dict[str, Any]) -> None:
    assert laid_out["codes"] > 500
    # 1710 code objects on 910 pages, and on 279 once packed (CPython 3.11.7, Textual 8.2)
    assert laid_out["code_pages_after"] * 2 < laid_out["code_pages_before"]


def test_no_pool_of_small_objects_keeps_more_than_one_pools_worth_of_free_blocks(laid_out: dict[str, Any]) -> None:
    before: dict[str, int] = laid_out["free_before"]
    after: dict[str, int] = laid_out["free_after"]
    if not before:
        pytest.skip("this Python does not report its small-object allocator (sys._debugmallocstats)")
    assert sum(before.values()) > 2 * sum(after.values())
    # what is left free is the fresh pool each size class was given last (16 KiB): an app's new objects
    # go there, together, and not into holes between the starter's objects
    for size_class, free in after.items():
        assert free <= 16384 // (16 * (int(size_class) + 1)), (size_class, free)


def test_the_c_heap_keeps_hardly_any_free_chunk_between_the_starters_own(laid_out: dict[str, Any]) -> None:
    if not laid_out["glibc"]:
        pytest.skip("not glibc: its heap is left as it is")
    assert len(laid_out["chunks"]) <= 8, laid_out["chunks"]


def test_a_function_made_before_a_freeze_runs_its_copy_too() -> None:
    """The package's import calls gc.freeze(), which hides what it froze from gc.get_objects(): a function made
    before a later import froze it must still be given its copy (whichever test module imports the app first)."""
    namespace: dict[str, Any] = {}
    exec("def tripled(x):\n    return 3 * x\n", namespace)  # a function of its own, made here
    tripled = namespace["tripled"]
    original = tripled.__code__
    frozen_before = gc.get_freeze_count()
    gc.freeze()
    try:
        called: dict[int, types.CodeType] = {}
        with compact.calls(called):
            assert tripled(2) == 6
        compact.pack_code(called)
        assert tripled.__code__ is not original and tripled.__code__.co_code == original.co_code
        assert gc.get_freeze_count() > 0  # frozen again, as it was
    finally:
        if not frozen_before:  # left as it was found: frozen where the package's import had frozen it
            gc.unfreeze()
    assert tripled(5) == 15
