"""The transactional id pool of a prefix: `{prefix}-{p}-{slot}`, built, told apart and chosen here.

A Spark partition `p` writes under one of a few slots, so the broker keeps a bounded number of ids
per query or job, and concurrent attempts of one partition never share one (they would fence each
other). Recovery fences the pool's open transactions that no record names: it must tell the pool's
ids exactly, so that a prefix `q1` never claims the ids of `q10`.

Design: docs/design.md section 5.
"""

from __future__ import annotations

import re
from collections.abc import Collection


def transactional_id(prefix: str, task_partition: int, slot: int) -> str:
    """`{prefix}-{p}-{slot}`: bounded (broker memory), and concurrent attempts never share one."""
    return f"{prefix}-{task_partition}-{slot}"


def in_pool(prefix: str, transactional_id: str) -> bool:
    """`{prefix}-{p}-{slot}` exactly (a prefix `q1` must not claim `q10-...`)."""
    return re.fullmatch(re.escape(prefix) + r"-\d+-\d+", transactional_id) is not None


def choose_slot(prefix: str, task_partition: int, attempt: int, slots: int,
                in_use: Collection[str]) -> int | None:
    """The pool slot a task attempt writes with (id `{prefix}-{p}-{slot}`): the free slots, those
    whose id no pending intent names and no stranded commit holds, taken in turn by attempt
    number. Deterministic; with nothing in use it is `attempt % slots`, and attempts that read the
    same log get distinct slots as long as they are fewer than the free slots (concurrent
    attempts of one partition never fence each other). None: no slot is free."""
    free = [s for s in range(slots) if transactional_id(prefix, task_partition, s) not in in_use]
    return free[attempt % len(free)] if free else None
