"""A paged KV cache, as vLLM's PagedAttention keeps one (Kwon et al., arXiv 2309.06180).

Key and Value rows live in fixed-size blocks of ``block_size`` token slots, in a pool of
physical blocks. A sequence owns a block table that maps its logical blocks (token t is in
logical block t // block_size, slot t % block_size) to physical ones, handed out from the
pool's free list when the last block fills. Reading the cache gathers the rows through the
table; the attention it computes is the same as with one contiguous cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_tui.core.scenario import Matrix


@dataclass(frozen=True)
class Address:
    token: int  # 0-based position in the sequence
    logical: int  # block_table index
    physical: int  # block in the pool
    slot: int  # row inside the block

    def text(self, label: str) -> str:
        return (f"token {self.token} ({label}) → block_table[{self.logical}] = physical {self.physical},"
                f" slot {self.slot}")


def pool_order(blocks: int, seed: int) -> tuple[int, ...]:
    """The order in which a pool of ``blocks`` hands out its free blocks: a seeded shuffle, the same every run.

    A real pool's free list is in no useful order after other sequences come and go.
    """
    return tuple(int(b) for b in np.random.default_rng(seed).permutation(blocks))


def pool_size(tokens: int, block_size: int) -> int:
    """Twice the blocks one sequence needs: room that other sequences would share."""
    return max(2, 2 * -(-tokens // block_size))


@dataclass(frozen=True)
class BlockTable:
    """A sequence's logical → physical block map after it holds ``tokens`` tokens."""

    block_size: int
    physical: tuple[int, ...]  # block_table[logical] = physical block
    tokens: int
    free: tuple[int, ...]  # the pool's free list, in hand-out order

    def address(self, token: int) -> Address:
        logical, slot = divmod(token, self.block_size)
        return Address(token, logical, self.physical[logical], slot)

    def grow(self, tokens: int) -> tuple[BlockTable, tuple[int, ...]]:
        """The table after appending tokens up to ``tokens``, and the physical blocks allocated for them."""
        need = -(-tokens // self.block_size)
        new = self.free[: max(0, need - len(self.physical))]
        if need - len(self.physical) > len(self.free):
            raise ValueError("the block pool is exhausted")
        return BlockTable(self.block_size, self.physical + new, tokens, self.free[len(new):]), new


    def release(self, first: int) -> tuple[BlockTable, tuple[int, ...]]:
        """The table once tokens before ``first`` have left a sliding window: blocks holding only
        such tokens go back to the front of the free list (reused first); their entries become −1."""
        freed = tuple(p for logical, p in enumerate(self.physical)
                      if p >= 0 and (logical + 1) * self.block_size <= first)
        if not freed:
            return self, ()
        physical = tuple(-1 if p in freed else p for p in self.physical)
        return BlockTable(self.block_size, physical, self.tokens, freed + self.free), freed


def empty_table(block_size: int, order: tuple[int, ...]) -> BlockTable:
    return BlockTable(block_size, (), 0, order)


class PagedStore:
    """The pool's K and V for one head: (blocks, block_size, d) arrays written through a block table."""

    def __init__(self, blocks: int, block_size: int, d_k: int, d_v: int) -> None:
        self.K = np.full((blocks, block_size, d_k), np.nan)  # unwritten slots are NaN: reading one would show
        self.V = np.full((blocks, block_size, d_v), np.nan)
        self.block_size = block_size

    def write(self, table: BlockTable, token: int, k: Matrix, v: Matrix) -> Address:
        address = table.address(token)
        self.K[address.physical, address.slot] = k
        self.V[address.physical, address.slot] = v
        return address

    def slots(self, table: BlockTable, first: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        """(physical block, slot) of tokens ``first`` … ``length − 1``, each looked up in the block table."""
        tokens = np.arange(first, length)
        physical = np.asarray(table.physical, dtype=np.int64)[tokens // self.block_size]
        if (physical < 0).any():
            raise ValueError("a token in a freed block was read")
        return physical, tokens % self.block_size

    def write_rows(self, table: BlockTable, first: int, K: Matrix, V: Matrix) -> None:
        """Rows of tokens ``first``, ``first + 1``, … written through the block table at once."""
        physical, slot = self.slots(table, first, first + K.shape[0])
        self.K[physical, slot] = K
        self.V[physical, slot] = V

    def gather(self, table: BlockTable, length: int, first: int = 0) -> tuple[Matrix, Matrix]:
        """Rows ``first`` … ``length − 1`` of K and V in token order, each read through the block table."""
        physical, slot = self.slots(table, first, length)
        return self.K[physical, slot], self.V[physical, slot]
