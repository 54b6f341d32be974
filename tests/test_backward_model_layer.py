"""docs/backward.md's path for a real model's head: export the layer as a plain scenario, add
[backward], train it. Checked by finite differences of the loss, not by the code that made it."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("glassllm")

from qkv_tui.core.engine import compute
from qkv_tui.core.gradients import gradients
from qkv_tui.core.scenario import load_scenario, scenario_from_data

MODEL = '[model]\nsource = "glassllm:en"\ntext = "Alice was"\nlayer = 1\nheads = [0, 2]\n'


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qkv_tui", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("layer")
    (folder / "model.toml").write_text(MODEL)
    out = _cli("--export", "toml", str(folder / "model.toml"))
    assert out.returncode == 0, out.stderr
    plain = tomllib.loads(out.stdout)
    n, d_out = len(plain["tokens"]), 2 * len(plain["heads"][0]["W_V"][0])  # two heads, no W_O
    target = ", ".join("[" + ", ".join(["0.05"] * d_out) + "]" for _ in range(n))
    path = folder / "layer.toml"
    path.write_text(out.stdout + f"\n[backward]\ntarget = [{target}]\nlr = 0.001\nsteps = 3\ntrain = [\"W_Q\", \"W_K\"]\n")
    return path


def test_the_exported_layer_trains(layer: Path) -> None:
    out = _cli("--export", "json", str(layer))
    assert out.returncode == 0, out.stderr
    losses = [step["loss"] for step in json.loads(out.stdout)["train"]]
    assert len(losses) == 4 and all(b < a for a, b in pairwise(losses))


def test_its_gradient_is_the_loss_s_slope(layer: Path) -> None:
    grads = gradients(compute(load_scenario(layer)))
    i, j, h = 3, 1, 0
    base = tomllib.loads(layer.read_text())

    def loss(delta: float) -> float:
        doc = json.loads(json.dumps(base))
        doc["heads"][h]["W_Q"][i][j] += delta
        out = np.asarray(_forward(doc))
        return 0.5 * float(np.sum((out - np.asarray(doc["backward"]["target"])) ** 2))

    eps = 1e-5
    slope = (loss(eps) - loss(-eps)) / (2 * eps)
    assert np.isclose(float(grads.heads[h].dW_Q[i][j]), slope, rtol=1e-5, atol=1e-9)



def _forward(doc: dict) -> list[list[float]]:
    return compute(scenario_from_data(doc, "layer.toml")).output.tolist()
