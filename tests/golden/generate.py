"""The generated half of the corpus: scenario files drawn once from the suite's strategies and kept.

Kept as files, not redrawn, so the corpus does not move when hypothesis or a strategy changes.
Only drawings the loader accepts are kept.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, settings

from qkv_tui.core.scenario import ScenarioError, parse_scenario
from tests.golden.corpus import INPUTS
from tests.strategies import cases
from tests.variants_cases import modern_cases

PLAIN, MODERN = 80, 220  # the plain keys; then the modern keys (norm, biases, rope, GQA, ALiBi, windows, sinks, W_O)


def _draw(strategy: object, count: int) -> list[str]:
    texts: list[str] = []

    @settings(max_examples=count * 3, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), deadline=None)
    @given(strategy)
    def collect(case: object) -> None:
        text = case.toml  # type: ignore[attr-defined]
        if len(texts) < count and text not in texts:
            texts.append(text)

    collect()
    return texts


def write_inputs() -> int:
    INPUTS.mkdir(exist_ok=True)
    for old in INPUTS.glob("*.toml"):
        old.unlink()
    kept = 0
    for prefix, strategy, count in (("plain", cases(), PLAIN), ("modern", modern_cases(), MODERN)):
        for i, text in enumerate(_draw(strategy, count)):
            try:
                parse_scenario(text, f"{prefix}_{i:03d}")
            except ScenarioError:
                continue
            (INPUTS / f"{prefix}_{i:03d}.toml").write_text(text, encoding="utf-8")
            kept += 1
    return kept
