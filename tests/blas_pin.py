"""One OpenBLAS kernel for every test process, so that frozen digits do not depend on the CPU.

The golden corpus and the snapshots freeze printed digits. OpenBLAS picks its kernels by CPU when NumPy loads, and
its AVX-512 (SkylakeX) kernels sum a matrix product in another order than its AVX2 (Haswell) ones: the last bit
moves, and now and then a printed digit with it (builtin/mla's tiles, frozen under Haswell's kernels, read otherwise
on an AVX-512 machine). Processes the tests start inherit the setting through the environment.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def pin_blas_kernels() -> None:
    """Haswell's kernels wherever the CPU has AVX2; must run before NumPy is first imported."""
    cpuinfo = Path("/proc/cpuinfo")
    if " avx2" not in (cpuinfo.read_text(encoding="utf-8") if cpuinfo.is_file() else ""):
        return  # no AVX2 (or not Linux on x86): OpenBLAS already runs one of the older kernels
    if "numpy" in sys.modules and os.environ.get("OPENBLAS_CORETYPE") != "Haswell":
        raise RuntimeError("NumPy was imported before OpenBLAS's kernels could be pinned; run with OPENBLAS_CORETYPE=Haswell")
    os.environ["OPENBLAS_CORETYPE"] = "Haswell"
