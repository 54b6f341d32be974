"""``python -m tests.golden write | check | dump DIR | inputs``: see the package docstring."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.blas_pin import pin_kernels

pin_kernels()  # the digits written are those the suite checks, on any CPU

from tests.golden.corpus import MANIFEST, digest, render_all  # noqa: E402


def _manifest() -> dict[str, dict[str, str]]:
    result: dict[str, dict[str, str]] = {}
    for name, kind, text in render_all():
        result.setdefault(name, {})[kind] = digest(kind, text)
    return result


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "check"
    if command == "write":
        MANIFEST.write_text(json.dumps(_manifest(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {MANIFEST}")
        return 0
    if command == "check":
        from tests.golden.compare import differences

        diffs = differences(_manifest())
        print("\n".join(diffs) if diffs else "golden corpus: identical")
        return 1 if diffs else 0
    if command == "dump" and len(argv) == 2:
        root = Path(argv[1])
        for name, kind, text in render_all():
            path = root / name / kind
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        print(f"dumped to {root}")
        return 0
    if command == "inputs":
        from tests.golden.generate import write_inputs

        print(f"wrote {write_inputs()} generated scenarios")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
