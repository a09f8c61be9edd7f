"""Deterministic sharding: `--shard K/N` keeps a disjoint, stable part of a command's items.

Shards are 0-based: `K/N` with 0 <= K < N. Whole families go together (so any shard can be
scored or probed alone): the benchmark's family ids are sorted, and the i-th family goes to shard
i % N (round robin: balanced to within one family). The assignment depends only on the
benchmark's family ids and N, never on the machine, the process or the selection, so shard K of
`evprobe run` and shard K of `evprobe capture` hold the same families.

Under a launcher that sets WORLD_SIZE > 1 (torchrun, accelerate launch), `evprobe run` and
`evprobe capture` take shard RANK/WORLD_SIZE themselves (see `distributed_shard`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from evprobe.core.errors import InputError

SHARDS_DIR = ".shards"  # data-parallel runs keep their shards in OUT/.shards/shard-K-of-N
THROUGHPUT_FILE = "throughput.json"  # one process's units, seconds and units per second (data parallel)


@dataclass(frozen=True)
class Shard:
    k: int  # 0-based index
    n: int  # number of shards

    def __post_init__(self) -> None:
        if self.n < 1 or not 0 <= self.k < self.n:
            raise InputError(f"shard {self.k}/{self.n} is out of range; use K/N with 0 <= K < N, e.g. 0/{max(self.n, 2)}")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """'K/N' (0-based K) -> Shard; a one-line InputError naming the fix otherwise."""
        head, sep, tail = text.strip().partition("/")
        try:
            if not sep:
                raise ValueError
            k, n = int(head), int(tail)
        except ValueError:
            raise InputError(f"--shard {text!r} is not K/N; write e.g. 0/4 (0-based K, 0 <= K < N)") from None
        return cls(k, n)

    def __str__(self) -> str:
        return f"{self.k}/{self.n}"

    @property
    def dirname(self) -> str:
        return f"shard-{self.k}-of-{self.n}"


def shard_of(family_id: str, families: Sequence[str], n: int) -> int:
    """The shard of `family_id` among `families` (all of the benchmark's family ids)."""
    order = {fid: i for i, fid in enumerate(sorted(set(families)))}
    return order[family_id] % n


def family_shards(families: Iterable[str], n: int) -> dict[str, int]:
    """Every family id -> its shard (sorted ids, round robin)."""
    return {fid: i % n for i, fid in enumerate(sorted(set(families)))}


class _InFamily(Protocol):
    family_id: str


_U = TypeVar("_U", bound=_InFamily)


def select_shard(items: Sequence[_U], shard: Shard | None, all_items: Sequence[_InFamily]) -> list[_U]:
    """The items of `items` whose family is in `shard` (order kept); all of them for None.

    `all_items` are the benchmark's items: their family ids fix the assignment.
    """
    return shard_of_ids(items, shard, (it.family_id for it in all_items))


def shard_of_ids(items: Sequence[_U], shard: Shard | None, family_ids: Iterable[str]) -> list[_U]:
    """`select_shard` with the assignment fixed by `family_ids` (all of the benchmark's family ids)."""
    if shard is None:
        return list(items)
    owner = family_shards(family_ids, shard.n)
    return [it for it in items if owner[it.family_id] == shard.k]


def distributed_shard() -> Shard | None:
    """Shard RANK/WORLD_SIZE when a launcher (torchrun, accelerate launch) set WORLD_SIZE > 1."""
    world = os.environ.get("WORLD_SIZE")
    if world is None:
        return None
    try:
        n, k = int(world), int(os.environ.get("RANK", "0"))
    except ValueError:
        raise InputError(f"WORLD_SIZE={world!r} / RANK={os.environ.get('RANK')!r} are not integers; "
                         "launch with torchrun") from None
    return Shard(k, n) if n > 1 else None
