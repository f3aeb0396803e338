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

# Ids per Spark partition: concurrent attempts of one partition (speculation, retries) each need
# one, and the broker keeps state for each (docs/design.md section 5).
DEFAULT_SLOTS = 8
# How often at most a commit lists the whole pool rather than describing its batch's own ids
# (`full_sweep_due`): the longest an open id outside every recent batch's pool stays unfenced
# while the query runs.
DEFAULT_FULL_SWEEP_INTERVAL_MS = 60_000


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


# Beyond this many ids, describing a batch's pool costs more than a listing on most clusters
# (~4 us per id to decode the answer, a listing ~0.3 us per id the broker knows: benchmarks/README.md
# section 5), so the commit lists instead.
MAX_DESCRIBED_IDS = 2048


def batch_pool(prefix: str, partitions: int, slots: int) -> list[str]:
    """Every id a task of a batch of `partitions` Spark partitions may write with: its losing
    attempts (speculative copies, failed attempts) are among them."""
    return [transactional_id(prefix, p, s) for p in range(partitions) for s in range(slots)]


def full_sweep_due(partitions: int | None, slots: int, last_listed_ms: int | None, now_ms: int,
                   interval_ms: int) -> bool:
    """Must this sweep list the whole pool (ListTransactions) rather than describe the batch's
    own ids (DescribeTransactions)? The broker answers a listing by scanning every transactional
    id it knows, so a listing's cost grows with the cluster, a description's with the batch.

    Yes when the batch's pool is unknown (`partitions` None) or too large to describe, and when
    this process has not listed it yet or its last listing is `interval_ms` old: an open id
    outside the batch's pool (a zombie of an earlier batch with more partitions, a slot beyond a
    lowered `slots`) is then fenced within the interval, not only at its own timeout or the next
    restart's recovery."""
    if partitions is None or partitions * slots > MAX_DESCRIBED_IDS or last_listed_ms is None:
        return True
    return not 0 <= now_ms - last_listed_ms < interval_ms  # also a clock set back: list now
