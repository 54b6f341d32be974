"""Modern attention's scenario keys (docs/scenario-format.md): one module per variant, registered here.

Each module holds what its keys are: the dataclass the engine reads, the keys, the parser with every
one-line error (naming the key, where it sits and what was expected, like the rest of the format),
the did-you-mean hints, its part of the ``--check`` summary and, for a top-level table, the lines
the TOML export writes for it. The loader (:mod:`qkv_tui.core.scenario`) and the export walk
:data:`TABLES`; ``--check`` walks :data:`FEATURES`. A part added since [value_scale] also names its
other faces (:class:`~qkv_tui.core.variants.common.Faces`: its head-pass builder, its stages, its JSON
field), and the Scenario keeps its value by key (``TABLE.of(sc)``): adding it is its modules and one
line in ``FEATURES`` (docs/architecture.md, "Adding a variant"). A part whose module is large may register
its table from a small module of its own (``differential_table``: the key, keys, lookalikes and faces, its
functions named by :class:`~qkv_tui.core.variants.common.Later`), so a scenario without it never loads the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qkv_tui.core.arrays import Vector as Vector  # re-exported: the modules that read a Norm or Rope import it from here
from qkv_tui.core.variants import alibi_table, biases, kv_heads, norm, qk_norm, rope, scale_from, sinks, softcap, window
from qkv_tui.core.variants import backward_table as backward_table  # the module that reads it loads with the table
from qkv_tui.core.variants import deltanet_table as deltanet_table  # the modules that read it load with the table
from qkv_tui.core.variants import gate as gate
from qkv_tui.core.variants import shared_kv_table as shared_kv_table  # the module that reads it loads with the table
from qkv_tui.core.variants import v_norm as v_norm
from qkv_tui.core.variants import value_scale as value_scale
from qkv_tui.core.variants.biases import parse_bias as parse_bias
from qkv_tui.core.variants.common import MAX_INDEX as MAX_INDEX
from qkv_tui.core.variants.common import Checker as Checker
from qkv_tui.core.variants.common import Context as Context
from qkv_tui.core.variants.common import Features as Features
from qkv_tui.core.variants.common import HeadFeatures as HeadFeatures
from qkv_tui.core.variants.common import Keys, Lookalikes, Table
from qkv_tui.core.variants.common import choice as choice
from qkv_tui.core.variants.common import number as number
from qkv_tui.core.variants.common import numbers as numbers
from qkv_tui.core.variants.common import positive as positive
from qkv_tui.core.variants.common import table_of as table_of
from qkv_tui.core.variants.differential_table import TABLE as _DIFFERENTIAL
from qkv_tui.core.variants.indexer_table import TABLE as _INDEXER
from qkv_tui.core.variants.kv_heads import kv_head_of as kv_head_of
from qkv_tui.core.variants.kv_heads import parse_kv_head as parse_kv_head
from qkv_tui.core.variants.kv_heads import parse_num_kv_heads as parse_num_kv_heads
from qkv_tui.core.variants.linear_table import TABLE as _LINEAR
from qkv_tui.core.variants.mla_table import TABLE as _MLA
from qkv_tui.core.variants.norm import DEFAULT_EPS as DEFAULT_EPS
from qkv_tui.core.variants.norm import NORM_KEYS as NORM_KEYS
from qkv_tui.core.variants.norm import NORM_KINDS as NORM_KINDS
from qkv_tui.core.variants.norm import Norm as Norm
from qkv_tui.core.variants.qk_norm import QKNorm as QKNorm
from qkv_tui.core.variants.rope import DEFAULT_BASE as DEFAULT_BASE
from qkv_tui.core.variants.rope import ROPE_KEYS as ROPE_KEYS
from qkv_tui.core.variants.rope import ROPE_LAYOUTS as ROPE_LAYOUTS
from qkv_tui.core.variants.rope import Rope as Rope
from qkv_tui.core.variants.sinks import parse_sink as parse_sink
from qkv_tui.core.variants.sinks import parse_sinks as parse_sinks
from qkv_tui.core.variants.ssd_table import TABLE as _SSD
from qkv_tui.core.variants.window import parse_window as parse_window
from qkv_tui.core.variants.window import sliding_allow as sliding_allow

if TYPE_CHECKING:
    from qkv_tui.core.variants.mla import Mla as Mla


def __getattr__(name: str) -> Any:
    """``Mla``, from [mla]'s module, imported the first time it is asked for (a scenario without [mla] never is)."""
    if name == "Mla":
        from qkv_tui.core.variants.mla import Mla

        return Mla
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# In the order ``--check`` names them (the tables and the keys of other tables interleave).
FEATURES: tuple[Table[Any] | Keys, ...] = (
    norm.TABLE,
    biases.KEYS,
    qk_norm.TABLE,
    rope.TABLE,
    _MLA,
    kv_heads.KEYS,
    alibi_table.TABLE,
    window.KEYS,
    sinks.KEYS,
    softcap.KEYS,
    scale_from.KEYS,
    gate.KEYS,
    _LINEAR,
    deltanet_table.TABLE,
    backward_table.TABLE,
    value_scale.TABLE,
    _DIFFERENTIAL,  # after [backward] and [value_scale], which it refuses for now
    v_norm.TABLE,  # Gemma 3n's value norm: after the tables it refuses
    _INDEXER,  # after [mla] (W_q may read its c_Q) and the tables it refuses
    _SSD,  # after every table it refuses
    shared_kv_table.TABLE,  # after every table it refuses
)

# The top-level tables, in the order the loader parses them (a table may read the ones before it:
# [alibi] reads [rope]'s positions) and the TOML export writes them.
TABLES: tuple[Table[Any], ...] = tuple(f for f in FEATURES if isinstance(f, Table))

# (table, key) -> (the key meant, why): a key in the form of another table, renamed by the message.
LOOKALIKES: Lookalikes = {pair: twin for f in FEATURES for pair, twin in f.lookalikes.items()}


def summary_parts(sc: Features) -> list[str]:
    """What ``--check`` adds to its one-line summary for the variant features a scenario uses."""
    return [part for f in FEATURES for part in f.summary_parts(sc)]
