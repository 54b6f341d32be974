"""``[rope]``: rotary position embeddings on Q and K (docs/scenario-format.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.toml_text import string
from qkv_tui.core.variants.common import MAX_INDEX, Context, Faces, Table, choice, number, write_whole
from qkv_tui.core.variants.rope_scaling import parse_partial, parse_scaling, summary, write_scaling
from qkv_tui.kernels import rope as rope_kernel
from qkv_tui.kernels.attention import Turn
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.rope_scaling import RopeScaling, base_inv_freq, rotated_dims
from qkv_tui.kernels.stats import Matrix

ROPE_KEYS = ("base", "layout", "positions", "partial", "scaling")
ROPE_LAYOUTS = ("interleaved", "half")
DEFAULT_BASE = 10000.0


@fixed(eq=True)
class Rope:
    """Rotary position embeddings on Q and K."""

    # cos and sin are never whole, so the scores of what it turns are written with decimals (teach/trace.py)
    scores_with_decimals: ClassVar[bool] = True
    # where position enters, as the Embed stage says it (core/part_questions.scenario_says)
    position_enters: ClassVar[str] = " Here position enters at the Rotate stage, which turns Q and K by each token's position."
    # what it changes of a head's pass and how (core/variants/refusals.py)
    acts_on: ClassVar[str] = "queries and keys"
    does: ClassVar[str] = "turns"
    # what a view says of it at a place (teach/stages/shared_kv.py: a layer that reuses K does this to Q alone)
    words: ClassVar[Mapping[str, str]] = MappingProxyType({"reuse.q": "turned by RoPE"})

    # what --compare tries with it (core/diagnose.py): its mistakes, and a setting whose numbers it does not try
    compared_mistakes: ClassVar[tuple[str, ...]] = ("rope_layout",)  # "half" for "interleaved", or the reverse

    base: float  # θ_i = base^(−2i/d_k)
    layout: str  # "interleaved": pair i = (2i, 2i+1); "half": pair i = (i, i + d_k/2)
    positions: tuple[int, ...]  # one per token
    partial: float = 1.0  # the share of d_k that turns: the first int(partial·d_k) dimensions
    scaling: RopeScaling | None = None  # [rope.scaling]: context extension of the frequencies

    @property
    def not_compared(self) -> str | None:
        """A setting --compare does not try the mistakes with; None where it tries them."""
        return "RoPE's partial or scaling" if self.partial != 1.0 or self.scaling is not None else None

    def compared_step(self, M: Matrix, mistakes: frozenset[str]) -> Matrix:
        """M (rows, d_k) turned as --compare's plain attention turns each head's Q and K (every dimension, the
        unscaled frequencies, rows from position 0 of ``positions``), with its mistakes among ``mistakes``."""
        layout = self.layout
        if "rope_layout" in mistakes:
            layout = "half" if layout == "interleaved" else "interleaved"
        return rope_kernel.turn(M, layout, self.base, tuple(self.positions)[: M.shape[0]])

    def turn_at(self, positions: tuple[int, ...] | None, d_k: int, policy: Policy = EXACT) -> Turn:
        """Its cos and sin for every token's position, for heads (or the blocks a score reads, part_questions
        score_width) of width d_k: how it turns Queries and Keys (core/part_questions.py turn)."""
        assert positions is not None
        a = rope_kernel.angles_at(self.inv_freq(d_k), positions)  # (n, r/2): r = d_k unless partial
        factor = self.attention_factor  # YaRN's: it multiplies cos and sin (so the scores carry it squared)
        if factor == 1.0:
            return Turn(np.cos(a), np.sin(a), self.pairs(d_k))
        # by hand cos, sin and the factor are each written down rounded, then their products
        f = policy.worked(np.array(factor))
        cos, sin = policy.worked(np.cos(a)) * f, policy.worked(np.sin(a)) * f  # (n, r/2)
        return Turn(policy.worked(cos), policy.worked(sin), self.pairs(d_k))

    def block_refusal(self, width: int, whole: int) -> str | None:
        """Why it cannot turn each block of a head on its own as a head ``width`` wide (a differential head's halves,
        d of a head ``whole`` = 2d wide: core/variants/differential.py asks), in words that follow the comma of
        "[table] with [rope] turns each half of a head on its own,"; None where it can."""
        if width % 2:
            return (f"so it needs an even d, but d = {width} (W_Q is {whole} wide); expected W_Q widths that are"
                    " multiples of 4")
        r = self.rotated(width)
        if r % 2:
            return (f"and [rope] partial turns {r} of its d = {width} dimensions; expected an even count (dimensions"
                    " turn in pairs)")
        return None

    def columns_turn(self, width: int, layout: str) -> rope_kernel.RopeSpec | None:
        """Its turn of the first ``width`` columns of another part's vectors, in that part's own ``layout`` (the DSA
        indexer's q_I and k_I: kernels/rope.py columns): at its positions, with its frequencies for that width
        (scaled where it scales them) and YaRN's factor on cos and sin; None where ``width`` is 0."""
        thetas = self.inv_freq(width) if self.scaling is not None and width > 0 else None
        factor = self.attention_factor if width else 1.0
        return rope_kernel.columns(width, layout, self.positions, self.base, thetas, factor)

    def rotated(self, d_k: int) -> int:
        """r, how many of a head's d_k dimensions turn; the rest pass through."""
        return rotated_dims(d_k, self.partial)

    def pairs(self, d_k: int) -> list[tuple[int, int]]:
        """The dimensions rotated together, pair i first, within the first r: what makes the two layouts differ."""
        return rope_kernel.pairs(self.layout, self.rotated(d_k))

    def theta_unscaled(self, i: int, d_k: int) -> float:
        """Frequency of pair i before any scaling, base^(−2i/r)."""
        return rope_kernel.theta(self.base, i, self.rotated(d_k))

    def theta(self, i: int, d_k: int) -> float:
        """Frequency of pair i: angles grow by this much per position (after scaling)."""
        if self.scaling is None:
            return self.theta_unscaled(i, d_k)
        return float(self.inv_freq(d_k)[i])

    def inv_freq(self, d_k: int) -> Matrix:
        """Every pair's frequency, after scaling: (r/2,)."""
        r = self.rotated(d_k)
        thetas = base_inv_freq(self.base, r)  # (r/2,)
        return thetas if self.scaling is None else self.scaling.apply(self.base, r, thetas)

    def kept(self, d_k: int) -> Matrix:
        """wᵢ of each pair, θ'ᵢ = wᵢ·θᵢ + (1 − wᵢ)·θᵢ/factor: (r/2,); all 1 without scaling."""
        r = self.rotated(d_k)
        thetas = base_inv_freq(self.base, r)  # (r/2,)
        return np.ones(r // 2) if self.scaling is None else self.scaling.kept(self.base, r, thetas)

    @property
    def attention_factor(self) -> float:
        """What cos and sin are multiplied by: YaRN's attention factor, else 1."""
        return 1.0 if self.scaling is None else self.scaling.scale

    def overflow_cause(self, name: str) -> str | None:
        """A cause of an overflow of Q, K turned or the scores to name first (core/part_questions.py): YaRN's a
        multiplies cos and sin, so it, not Q, may be huge."""
        a = self.attention_factor
        if name not in ("Q_rot", "K_rot", "scores") or a == 1.0:
            return None
        carried = "multiplies cos and sin" if name != "scores" else "multiplies cos and sin, so the scores carry a²"
        return f"a smaller [rope.scaling] attention_factor (a = {a:g} {carried})"


def latent_partial(partial: str, d_nope: int, d_rope: int) -> str:
    """[mla] with a partial [rope]: its own split already leaves part of each head unturned."""
    return (f"[rope] partial = {partial} does not go with [mla]: latent attention already turns only part of each"
            f" query and key, all d_rope = {d_rope} of its rotary dimensions (q_R and the shared k_R), and never the"
            f" d_nope = {d_nope} others; remove partial (d_nope and d_rope set the split)")


# DeepSeek-V2/V3/V3.2, the models [mla] follows, scale their RoPE only with YaRN (whose mscale_all_dim there also
# multiplies the softmax scale by m²: core/variants/mla.py)
def latent_scaling(kind: str) -> str:
    """[mla] with a [rope.scaling] other than YaRN."""
    return (f"[rope.scaling] type = \"{kind}\" does not go with [mla]: DeepSeek's latent attention scales its rotary"
            " parts only with YaRN (its mscale_all_dim also multiplies the softmax scale by m²); expected"
            " type = \"yarn\" or no [rope.scaling]")


def parse_rope(table: dict[str, Any], ctx: Context) -> Rope:
    v, tokens, head_dks = ctx.v, ctx.tokens, ctx.heads
    if ctx.is_cross:
        raise v.fail("[rope] needs self-attention (keys and queries share positions); remove [context] or [rope]")
    for name, d_k in head_dks:
        if d_k % 2:
            raise v.fail(f"[rope] needs an even d_k (dimensions rotate in pairs), but {name} has d_k = {d_k}")
    widths: dict[int, list[str]] = {}
    for name, d_k in head_dks:
        widths.setdefault(d_k, []).append(name)
    if len(widths) > 1:
        def heads_with(names: list[str]) -> str:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            return f"{shown} {'has' if len(names) == 1 else 'have'}"

        said = "; ".join(f"{heads_with(names)} d_k = {d_k}" for d_k, names in widths.items())
        raise v.fail(f"[rope] needs every head to have the same d_k (the format keeps one set of frequencies"
                     f" θ_i = base^(−2i/d_k) for every head, as RoPE models do), but {said}; expected one d_k for every head")
    if "layout" not in table:
        raise v.fail(
            "[rope] is missing 'layout'; expected layout = \"interleaved\" (pairs (0,1), (2,3), …: RoFormer, Meta's LLaMA)"
            " or \"half\" (pairs (0, d_k/2), …: Hugging Face rotate_half)"
        )
    layout = choice(v, table["layout"], "[rope] layout", ROPE_LAYOUTS)
    base = DEFAULT_BASE
    if "base" in table:
        base = number(v, table["base"], "[rope] base")
        if base <= 0:
            raise v.fail(f"[rope] base = {_show(table['base'])}; expected a finite number > 0 (θ_i = base^(−2i/d_k))")
    n = len(tokens)
    positions = tuple(range(n))
    if "positions" in table:
        raw = table["positions"]
        if not isinstance(raw, list):
            raise v.fail(f"[rope] positions must be a list of {n} whole numbers >= 0 (one per token), got {_kind(raw)}")
        if len(raw) != n:
            raise v.fail(f"[rope] positions has {len(raw)} number{'s' if len(raw) != 1 else ''}; expected {n}, one per token")
        out = []
        for i, p in enumerate(raw):
            where = f"[rope] positions item {i + 1} ({json.dumps(tokens[i], ensure_ascii=False)})"
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise v.fail(f"{where} is {_kind(p)}; expected a whole number >= 0 (the token's position){write_whole(p, 0)}")
            if p > MAX_INDEX:
                raise v.fail(f"{where} is {_show(p)}, too large; expected a position below 2^53")
            out.append(p)
        positions = tuple(out)
    # before the d_k rules below, which would read d_rope as a head's d_k
    if ctx.latent is not None and "partial" in table and number(v, table["partial"], "[rope] partial") != 1.0:
        raise v.fail(latent_partial(_show(table["partial"]), *ctx.latent))
    partial = parse_partial(v, table["partial"], head_dks[0][1] if head_dks else None) if "partial" in table else 1.0
    scaling = parse_scaling(v, table["scaling"]) if "scaling" in table else None
    if ctx.latent is not None and scaling is not None and scaling.type != "yarn":
        raise v.fail(latent_scaling(scaling.type))
    return Rope(base, layout, positions, partial, scaling)


def write_rope(rope: Rope) -> list[str]:
    """Positions as whole numbers (not through the float writer: 2^53 itself must stay an integer)."""
    lines = ["[rope]", f"layout = {string(rope.layout)}", f"base = {float(rope.base)!r}",
             f"positions = [{', '.join(map(str, rope.positions))}]"]
    if rope.partial != 1.0:
        lines.append(f"partial = {float(rope.partial)!r}")
    return lines + ([] if rope.scaling is None else write_scaling(rope.scaling))


TABLE: Table[Rope] = Table(
    "rope", ROPE_KEYS, parse_rope, lambda rope: f"rope {rope.layout}{summary(rope.partial, rope.scaling)}", write_rope,
    lookalikes={("[rope]", key): ("scaling", f"{key} is a field of [rope.scaling]: write it under that header")
                for key in ("factor", "type", "original_max_position_embeddings", "low_freq_factor",
                            "high_freq_factor", "beta_fast", "beta_slow", "attention_factor", "rope_type")},
    # its Rotate and dRotate for a head scored in blocks (each half of a differential head), where the one-map ones
    # step aside: after Rotate, and after the stages placed after dRotate
    faces=Faces(head="qkv_tui.core.rope_part:rope_part", mistakes=Rope.compared_mistakes,
                stages=(("rotate", "rotate_blocks", "ROTATE"), ("drotate", "rotate_blocks", "BACKWARD"))),
)
