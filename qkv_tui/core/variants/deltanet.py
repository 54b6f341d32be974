"""``[deltanet]``: the gated delta rule of Qwen3-Next's and Qwen3.5's linear-attention layers (Yang et al. 2024)
in place of every head's softmax (docs/scenario-format.md, "[deltanet]").

Per head and token, with q and k L2-normalised (q also ÷ √d_k): S ← S·e^{g_t}; kv = Sᵀk_t;
δ = (v_t − kv)·β_t; S ← S + k_t δᵀ; o_t = Sᵀq_t. The log decay g and the write strength β are given
(``g``, ``beta``: n × num_heads) or computed as the models compute them: β = σ(X̂·W_b),
g = −e^{A_log}·softplus(X̂·W_a + dt_bias). Written with a gate per key channel (core/variants/kda_gates.py: ``g``
n × num_heads × d_k, or Kimi Linear's W_fa, W_fb, A_log, dt_bias), it is Kimi Delta Attention: S ← diag(e^{g_t})·S.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np

from qkv_tui.base.values import kind as _kind
from qkv_tui.core.arrays import Matrix, Vector
from qkv_tui.core.toml_text import vector
from qkv_tui.core.variants import deltanet_table
from qkv_tui.core.variants.common import Context, Reader, Table, numbers
from qkv_tui.core.variants.deltanet_io import DeltaIO, parse_io, summary, write_io
from qkv_tui.core.variants.deltanet_table import DELTANET_KEYS as DELTANET_KEYS
from qkv_tui.core.variants.deltanet_table import WEIGHTS as WEIGHTS
from qkv_tui.core.variants.refusals import STATE, refused, replaces_softmax

if TYPE_CHECKING:  # Kimi's gates per key channel load with the first [deltanet] read, not with every start-up
    from qkv_tui.core.variants.kda_gates import KdaGates

L2_EPS = 1e-6  # pinned: x / √(Σx² + 1e-6), as transformers' l2norm (and FLA's)


@dataclass(frozen=True, eq=False)
class DeltaNet:
    """g and β per token and head, given or computed from the models' weights."""

    not_plain: ClassVar[str] = "[deltanet]"  # what makes the attention other than plain (core/diagnose.py)
    state: ClassVar[bool] = True  # a running state in place of every head's softmax (core/part_questions.py)
    cache_kind: ClassVar[str] = "deltanet"  # what the cost view calls its layer's cache (core/cost.py)

    g: Matrix | None  # (n, num_heads) the log decay, given; None: computed from W_a, A_log, dt_bias
    beta: Matrix | None  # (n, num_heads) the write strength, given; None: computed from W_b
    W_a: Matrix | None = None  # (d_model, num_heads) X̂·W_a is the decay's input
    W_b: Matrix | None = None  # (d_model, num_heads) σ(X̂·W_b) = β
    A_log: Vector | None = None  # (num_heads,) −e^{A_log} is the decay's rate
    dt_bias: Vector | None = None  # (num_heads,) added to X̂·W_a before the softplus
    io: DeltaIO | None = None  # the short convolution and the gated output norm (deltanet_io.py); None without
    channels: KdaGates | None = None  # a gate per key channel (Kimi Delta Attention); g, W_a, A_log, dt_bias then None

    # what the closing summary and the heads view call a row of the weights (core/part_questions.scenario_says):
    # q·k times the decay weighs the corrections δ, not V
    looks_heading: ClassVar[str] = "Whose δ each token weighs most"
    weighed: ClassVar[str] = "δ"  # what the Train view says the map's weights weigh (V where no table says)

    @property
    def lead(self) -> tuple[str, str]:
        """What a page says it works (core/part_questions.lead)."""
        if self.channels is not None:
            return ("The gated delta rule with a gate per key channel (Kimi Delta Attention)", "")
        return ("The gated delta rule", "")


    @property
    def weights_note(self) -> str:
        if self.channels is not None:  # Kimi Delta Attention: each key channel decays on its own, inside the dot
            return " (Σᵢ q[i]·k[i] each times its channel's decay; not a distribution)"
        return " (q·k times the decay; not a distribution)"

    def x_paths(self, grads: Any) -> list[tuple[str, Matrix, Matrix]]:
        """Its paths into X̂ where it computes g (through W_a) and β (through W_b) from X̂, for dEmbed
        (teach/stages/embed.py): (role, the gradient at X̂·W_role, W_role)."""
        from qkv_tui.kernels.deltanet_backward import GatesBack  # with the layer's gradients

        gb = grads.part(GatesBack)
        if gb is None:
            return []
        return [(role, d, W) for role, d, W in (("a", gb.da, self.W_a), ("b", gb.db, self.W_b))
                if d is not None and W is not None]

    def overflow_inputs(self, X_in: Matrix, at: Any) -> tuple[str, str] | None:
        """The gates' inputs X̂·W_a + dt_bias and X̂·W_b past float64 (core/part_questions.py): σ and softplus would
        hide it as 1 or ∞, and every page that works them out term by term would meet the overflow."""
        kda = self.channels
        if kda is not None and kda.W_fa is not None and kda.W_fb is not None and kda.dt_bias is not None:
            # Kimi's low-rank gate: its bottleneck first, then each channel's logit
            with np.errstate(over="ignore", invalid="ignore"):
                low = X_in @ kda.W_fa  # (n, r)
                logit = low @ kda.W_fb + np.concatenate(kda.dt_bias)[None, :]  # (n, Σ d_k)
            for what, array, hint in (("X̂·W_fa", low, "X or W_fa"),
                                      ("(X̂·W_fa)·W_fb + dt_bias", logit, "X, W_fa, W_fb or dt_bias")):
                if (where := at.first(array)) is not None:
                    return f"values in [deltanet]'s {what} overflow float64 at {where}", f"expected smaller {hint}"
        for what, W, bias in (("X̂·W_a + dt_bias", self.W_a, self.dt_bias), ("X̂·W_b", self.W_b, None)):
            if W is None:
                continue
            with np.errstate(over="ignore", invalid="ignore"):
                logit = X_in @ W + (0.0 if bias is None else bias[None, :])  # (n, num_heads)
            if (where := at.first(logit)) is not None:
                return (f"values in [deltanet]'s {what} overflow float64 at {where}",
                        f"expected smaller X or {what.split('·')[1].split(' ')[0]}")
        return None


def _grid(v: Any, value: Any, key: str, rows: int, cols: int, what: str) -> Matrix:
    if not isinstance(value, list):
        raise v.fail(f"{key} must be a list of {rows} rows ({what}), got {_kind(value)}")
    if len(value) != rows:
        raise v.fail(f"{key} has {len(value)} row{'s' if len(value) != 1 else ''}; expected {rows}, one per token")
    out = np.stack([numbers(v, row, f"{key} row {r + 1}", cols, "one per head, num_heads") for r, row in enumerate(value)])
    out.setflags(write=False)
    return out  # (rows, cols)


def parse_deltanet(table: dict[str, Any], ctx: Context) -> DeltaNet:
    v = ctx.v
    replaces_softmax(v, ctx, "deltanet")
    other = refused(ctx, ((STATE, "[deltanet] and [{key}] both replace every head's softmax; expected one of them"),))
    if other is not None:
        raise v.fail(other[1])
    n, heads, d_model = len(ctx.tokens), len(ctx.heads), ctx.d_model
    g = beta = W_a = W_b = A_log = dt_bias = channels = None
    from qkv_tui.core.variants.kda_gates import parse_kda_gates, per_channel

    if per_channel(table):
        channels = parse_kda_gates(table, ctx)
    elif "g" in table:
        for key in ("W_a", "A_log", "dt_bias"):
            if key in table:
                raise v.fail(f"[deltanet] has both g and {key}; expected g (n × num_heads) or W_a, A_log and dt_bias,"
                             " from which g is computed")
        g = _grid(v, table["g"], "[deltanet] g", n, heads, "the log decay g of each token, one per head")
        if (g > 0).any():
            r, c = (int(i) for i in np.argwhere(g > 0)[0])
            raise v.fail(f"[deltanet] g row {r + 1}, column {c + 1} is {g[r, c]:g}; expected g <= 0 (a log decay:"
                         " e^g <= 1 shrinks the state, e^g > 1 would grow it without bound)")
    else:
        missing = [k for k in ("W_a", "A_log", "dt_bias") if k not in table]
        if missing:
            raise v.fail(f"[deltanet] is missing {missing[0]!r}; expected g = [[...]] (n × num_heads), or W_a"
                         " (d_model × num_heads), A_log and dt_bias (num_heads each), as Qwen3-Next computes g")
        W_a = cast(Reader, v).matrix(table["W_a"], "[deltanet] W_a")
        _shape(v, W_a, "[deltanet] W_a", d_model, heads)
        A_log = numbers(v, table["A_log"], "[deltanet] A_log", heads, "one per head, num_heads")
        dt_bias = numbers(v, table["dt_bias"], "[deltanet] dt_bias", heads, "one per head, num_heads")
    if "beta" in table:
        if "W_b" in table:
            raise v.fail("[deltanet] has both beta and W_b; expected beta (n × num_heads) or W_b, from which β = σ(X̂·W_b)")
        beta = _grid(v, table["beta"], "[deltanet] beta", n, heads, "the write strength β of each token, one per head")
    elif "W_b" in table:
        W_b = cast(Reader, v).matrix(table["W_b"], "[deltanet] W_b")
        _shape(v, W_b, "[deltanet] W_b", d_model, heads)
    else:
        raise v.fail("[deltanet] is missing 'beta'; expected beta = [[...]] (n × num_heads), or W_b (d_model × num_heads),"
                     " from which β = σ(X̂·W_b)")
    return DeltaNet(g, beta, W_a, W_b, A_log, dt_bias, parse_io(table, ctx), channels)


def _shape(v: Any, M: Matrix, key: str, rows: int, cols: int) -> None:
    if M.shape[0] != rows:
        raise v.fail(f"{key} has {M.shape[0]} rows; expected d_model = {rows} (it reads X̂, what the projections read)")
    if M.shape[1] != cols:
        raise v.fail(f"{key} has {M.shape[1]} columns; expected num_heads = {cols}, one per head")


def _rows(M: Matrix) -> str:
    return "[" + ", ".join(vector(row) for row in M) + "]"


def write_deltanet(dn: DeltaNet) -> list[str]:
    out = ["[deltanet]"]
    if dn.channels is not None:
        from qkv_tui.core.variants.kda_gates import write_kda_gates

        out += write_kda_gates(dn.channels)
    elif dn.g is not None:
        out.append(f"g = {_rows(dn.g)}")
    else:
        assert dn.W_a is not None and dn.A_log is not None and dn.dt_bias is not None
        out += [f"W_a = {_rows(dn.W_a)}", f"A_log = {vector(dn.A_log)}", f"dt_bias = {vector(dn.dt_bias)}"]
    if dn.beta is not None:
        out.append(f"beta = {_rows(dn.beta)}")
    else:
        assert dn.W_b is not None
        out.append(f"W_b = {_rows(dn.W_b)}")
    return out + write_io(dn.io)


def _summary(dn: DeltaNet) -> str:
    if dn.channels is not None:
        from qkv_tui.core.variants.kda_gates import summary as kda_summary

        where = "β given" if dn.beta is not None else "β from W_b"
        return f"gated delta rule, {kda_summary(dn.channels)}, {where}" + summary(dn.io)
    if dn.g is not None and dn.beta is not None:
        where = "g, β given"
    elif dn.g is None and dn.beta is None:
        where = "g, β from the weights"
    elif dn.g is not None:  # either may be given while the other is computed: say which is which
        where = "g given, β from W_b"
    else:
        where = "g from W_a, A_log and dt_bias, β given"
    return f"gated delta rule ({where})" + summary(dn.io)


def trains(ctx: Context) -> tuple[str, ...]:
    """Its weights in [backward]'s train list, those it gives."""
    dn = ctx.earlier.get("deltanet")
    return tuple(w for w in WEIGHTS if dn is not None and getattr(dn, w, None) is not None)


def refuse_backward(ctx: Context) -> str | None:
    """What [backward] cannot read back yet: no gradients through the short convolution or the gated output norm, and
    kernels/deltanet_backward.py reads one g per token and head."""
    dn = ctx.earlier.get("deltanet")
    if getattr(dn, "io", None) is not None:
        return ("[backward] with [deltanet]'s short convolution or gated output norm (conv_q …, W_Z) is not"
                " supported yet; remove [backward] or those keys")
    if getattr(dn, "channels", None) is not None:
        return ("[backward] with a gate per key channel in [deltanet] (Kimi Delta Attention) is not supported yet;"
                " remove [backward], or give g one number per token and head")
    return None


# registered in deltanet_table.py, whose functions are this module's (a scenario without the table loads only that)
TABLE: Table[DeltaNet] = deltanet_table.TABLE
