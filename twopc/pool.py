"""The transactional id pool of a prefix: `{prefix}-{p}-{slot}`, built and told apart here.

A Spark partition `p` writes under one of a few slots, so the broker keeps a bounded number of ids
per query or job, and concurrent attempts of one partition never share one (they would fence each
other). Recovery fences the pool's open transactions that no record names: it must tell the pool's
ids exactly, so that a prefix `q1` never claims the ids of `q10`.
"""

from __future__ import annotations


def transactional_id(prefix: str, task_partition: int, slot: int) -> str:
    """`{prefix}-{p}-{slot}`: bounded (broker memory), and concurrent attempts never share one."""
    return f"{prefix}-{task_partition}-{slot}"
