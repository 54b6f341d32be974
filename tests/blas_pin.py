"""One set of floating-point kernels for every test process, so that frozen digits do not depend on the CPU.

The golden corpus and the snapshots freeze printed digits. Two libraries pick their kernels by CPU when NumPy
loads, and on a CPU with AVX-512 both pick ones that sum in another order than their AVX2 ones: OpenBLAS's
matrix products (its SkylakeX kernels against Haswell's) and NumPy's own SIMD loops (its X86_V4 and AVX512_*
targets). The last bit moves, and now and then a printed digit with it: builtin/mla's tiles and a generated
scenario's walk, frozen on an AVX2 machine, read otherwise on an AVX-512 one. So every test process uses the AVX2
kernels wherever the CPU has them. Processes the tests start inherit the choice through the environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# NumPy 2.4's dispatch targets past AVX2 on x86, each with the /proc/cpuinfo flags it needs (NumPy refuses to
# disable a target the CPU lacks, so only those the CPU has are named)
_NUMPY_TARGETS = {
    "X86_V4": ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"),
    "AVX512_ICL": ("avx512vbmi", "avx512_vbmi2", "avx512_vnni", "avx512_bitalg", "avx512_vpopcntdq", "avx512ifma"),
    "AVX512_SPR": ("avx512_fp16",),
}


def _cpu_flags() -> set[str]:
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text(encoding="utf-8", errors="replace") if cpuinfo.is_file() else ""
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def pin_kernels() -> None:
    """AVX2's kernels in OpenBLAS and NumPy wherever the CPU has AVX2; must run before NumPy is first imported."""
    if "OPENBLAS_CORETYPE" in os.environ and "QKV_KERNELS_PINNED" in os.environ:
        return  # a process the suite started: the choice came with the environment
    flags = _cpu_flags()
    if "avx2" not in flags:
        return  # no AVX2 (or not Linux on x86): both libraries already run their older kernels
    if "numpy" in sys.modules:
        raise RuntimeError("NumPy was imported before the test kernels could be pinned (tests/blas_pin.py)")
    env = {"OPENBLAS_CORETYPE": "Haswell", "QKV_KERNELS_PINNED": "1"}
    targets = [name for name, needs in _NUMPY_TARGETS.items() if all(flag in flags for flag in needs)]
    if targets:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(targets)
        # a NumPy that does not know a target refuses to load: try it once in a child, keep the pin only if it loads
        probe = subprocess.run([sys.executable, "-W", "error", "-c", "import numpy"], env={**os.environ, **env},
                               capture_output=True, check=False)
        if probe.returncode != 0:
            del env["NPY_DISABLE_CPU_FEATURES"]
    os.environ.update(env)
