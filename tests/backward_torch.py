"""The forward pass written again in PyTorch, from a Scenario's numbers, with every weight a leaf tensor, so
torch.autograd gives the reference gradients (float64). It shares nothing with the engine but the
scenario's constants: RoPE's frequencies and pairs, the mask, the ALiBi slopes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from qkv_tui.core.gradients import Gradients
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants.alibi import TABLE as ALIBI
from qkv_tui.kernels.sharing import kv_owners

torch = pytest.importorskip("torch", reason="PyTorch is in the test extra (pip install -e '.[test]')")
F = torch.nn.functional
TOL = {"rtol": 1e-9, "atol": 1e-9}


def leaf(values: Any) -> Any:
    return torch.tensor(np.asarray(values, dtype=np.float64), dtype=torch.float64, requires_grad=True)


def params_of(sc: Scenario) -> dict[str, Any]:
    """Every weight as a leaf: per query head W_Q, b_Q, W_G, sink; per K/V head (its first reader) W_K, W_V, b_K, b_V."""
    P: dict[str, Any] = {"X": leaf(sc.X)}
    owners = kv_owners([sc.kv_head(h) for h in range(len(sc.heads))], sc.heads)
    for h, head in enumerate(sc.heads):
        for name in ("W_Q", "b_Q", "W_G"):
            if getattr(head, name) is not None:
                P[f"{name}{h}"] = leaf(getattr(head, name))
        if head.sink is not None:
            P[f"sink{h}"] = leaf(head.sink)
        if owners[h] == h:
            for name in ("W_K", "W_V", "b_K", "b_V"):
                if getattr(head, name) is not None:
                    P[f"{name}{h}"] = leaf(getattr(head, name))
    if sc.W_O is not None:
        P["W_O"] = leaf(sc.W_O)
    if sc.b_O is not None:
        P["b_O"] = leaf(sc.b_O)
    if sc.norm is not None:
        P["gamma"] = leaf(sc.norm.gamma)
        if sc.norm.beta is not None:
            P["beta"] = leaf(sc.norm.beta)
    if sc.qk_norm is not None:
        P["gamma_q"], P["gamma_k"] = leaf(sc.qk_norm.gamma_q), leaf(sc.qk_norm.gamma_k)
    return P


def rms(x: Any, gamma: Any, eps: float) -> Any:
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * gamma


def turn(x: Any, sc: Scenario) -> Any:
    assert sc.rope is not None and sc.positions is not None
    d_k = x.shape[1]
    angles = torch.tensor(np.outer(np.asarray(sc.positions, dtype=np.float64), sc.rope.inv_freq(d_k)))
    cos, sin = torch.cos(angles) * sc.rope.attention_factor, torch.sin(angles) * sc.rope.attention_factor
    cols = list(x.unbind(dim=1))
    for i, (a, b) in enumerate(sc.rope.pairs(d_k)):
        xa, xb = x[:, a], x[:, b]
        cols[a] = xa * cos[:, i] - xb * sin[:, i]
        cols[b] = xa * sin[:, i] + xb * cos[:, i]
    return torch.stack(cols, dim=1)


def pre_norm(sc: Scenario, P: dict[str, Any]) -> Any:
    """X through [norm] (torch's own RMSNorm or LayerNorm), or X itself without one."""
    X = P["X"]
    if sc.norm is None:
        return X
    if sc.norm.kind == "rms":
        return F.rms_norm(X, (X.shape[1],), weight=P["gamma"], eps=sc.norm.eps)
    return F.layer_norm(X, (X.shape[1],), weight=P["gamma"], bias=P.get("beta"), eps=sc.norm.eps)


def out_projected(P: dict[str, Any], outs: list[Any]) -> Any:
    """The heads' outputs side by side, through W_O and b_O where the scenario has them."""
    concat = torch.cat(outs, dim=1)
    final = concat @ P["W_O"] if "W_O" in P else concat
    if "b_O" in P:
        final = final + P["b_O"]
    return final


def forward(sc: Scenario, P: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The final output, and the intermediates (with retain_grad) the gradients are compared at."""
    keep: dict[str, Any] = {}
    X = pre_norm(sc, P)
    if sc.norm is not None:
        X.retain_grad()
        keep["X_norm"] = X
    X_kv = torch.tensor(sc.context_X) if sc.context_X is not None else X
    H = len(sc.heads)
    owners = kv_owners([sc.kv_head(h) for h in range(H)], sc.heads)

    def lin(x: Any, W: str, b: str) -> Any:
        out = x @ P[W]
        return out + P[b] if b in P else out

    Qs = [lin(X, f"W_Q{h}", f"b_Q{h}") for h in range(H)]
    Ks = {g: lin(X_kv, f"W_K{g}", f"b_K{g}") for g in set(owners)}
    Vs = {g: lin(X_kv, f"W_V{g}", f"b_V{g}") for g in set(owners)}
    for h, q in enumerate(Qs):
        q.retain_grad()
        keep[f"Q{h}"] = q
    for g in Ks:
        Ks[g].retain_grad()
        Vs[g].retain_grad()
        keep[f"K{g}"], keep[f"V{g}"] = Ks[g], Vs[g]
    qk = sc.qk_norm
    if qk is not None:
        d_k = sc.heads[0].d_k
        if qk.over == "head":
            Qs = [rms(q, P["gamma_q"], qk.eps) for q in Qs]
            Ks = {g: rms(k, P["gamma_k"], qk.eps) for g, k in Ks.items()}
        else:
            Qw = rms(torch.cat(Qs, dim=1), P["gamma_q"], qk.eps)
            Qs = [Qw[:, h * d_k:(h + 1) * d_k] for h in range(H)]
            kv_ids = sorted({sc.kv_head(h) for h in range(H)})
            reader = {kv: owners[next(h for h in range(H) if sc.kv_head(h) == kv)] for kv in kv_ids}
            Kw = rms(torch.cat([Ks[reader[kv]] for kv in kv_ids], dim=1), P["gamma_k"], qk.eps)
            Ks = {reader[kv]: Kw[:, i * d_k:(i + 1) * d_k] for i, kv in enumerate(kv_ids)}
    if sc.rope is not None:
        Qs = [turn(q, sc) for q in Qs]
        Ks = {g: turn(k, sc) for g, k in Ks.items()}
    allow = torch.tensor(sc.allow)
    outs = []
    for h, head in enumerate(sc.heads):
        q, k, v = Qs[h], Ks[owners[h]], Vs[owners[h]]
        divisor = math.sqrt(head.d_k) if sc.scale is None else sc.scale
        s = q @ k.T / divisor
        if head.softcap is not None:
            s = head.softcap * torch.tanh(s / head.softcap)
        alibi = ALIBI.of(sc)
        if alibi is not None:
            assert sc.positions is not None
            p = torch.tensor(sc.positions, dtype=torch.float64)
            s = s + alibi.slopes[h] * (p[None, :] - p[:, None])
        s = torch.where(allow, s, torch.tensor(float("-inf"), dtype=torch.float64))
        if head.sink is not None:
            col = P[f"sink{h}"].expand(s.shape[0], 1)
            w = torch.softmax(torch.cat([s, col], dim=1), dim=1)[:, :-1]
        else:
            w = torch.softmax(s, dim=1)
        out = w @ v
        if head.W_G is not None:
            out = out * torch.sigmoid(X @ P[f"W_G{h}"])
        outs.append(out)
    return out_projected(P, outs), keep


def close(ours: Any, theirs: Any, what: str) -> None:
    assert theirs is not None, what
    assert np.allclose(np.asarray(ours), theirs.detach().numpy(), **TOL), what


def backward_checked(sc: Scenario, g: Gradients, P: dict[str, Any], final: Any) -> None:
    """torch's backward from the scenario's loss; then the loss, dX and the weights around the heads (W_O, b_O,
    the norms' gains) against ours, and ours None for each the scenario does not have."""
    loss = loss_of(sc, final)
    loss.backward()
    if sc.backward is not None and sc.backward.target is not None:
        assert g.loss is not None and abs(g.loss - loss.item()) <= 1e-9 * max(1.0, abs(g.loss))
    close(g.dX, P["X"].grad, "dX")
    for name, ours in (("W_O", g.dW_O), ("b_O", g.db_O), ("gamma", g.dgamma), ("beta", g.dbeta),
                       ("gamma_q", g.dgamma_q), ("gamma_k", g.dgamma_k)):
        if name in P:
            close(ours, P[name].grad, name)
        else:
            assert ours is None, name


def loss_of(sc: Scenario, final: Any) -> Any:
    bw = sc.backward
    assert bw is not None
    if bw.dO is not None:
        return (final * torch.tensor(bw.dO)).sum()  # its gradient at the output is dO itself
    if bw.cross_entropy:  # through the unembedding, averaged over the tokens as torch's default
        W_U = torch.tensor(np.asarray(bw.W_U, dtype=np.float64))
        return F.cross_entropy(final @ W_U, torch.tensor(bw.next, dtype=torch.long))
    diff = final - torch.tensor(bw.target)
    return 0.5 * (diff * diff).sum()
