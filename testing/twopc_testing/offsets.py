"""A consumer group's committed offsets as read_committed consumers would see them, for the tests of
twopc.commitSourceOffsets: OffsetFetch with require_stable, which answers UNSTABLE_OFFSET_COMMIT
while offsets wait in an open transaction (or its markers are still on their way)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from twopc.control import ControlClient
from twopc.control.errors import ERROR_CODES, error_name

_UNSTABLE = ERROR_CODES["UNSTABLE_OFFSET_COMMIT"]

TopicPartition = tuple[str, int]


class OffsetsNotStable(AssertionError):
    """The group's offsets stayed pending in an open transaction past the wait."""


def stable_group_offsets(config: Mapping[str, str], group: str,
                         partitions: Sequence[TopicPartition] | None = None,
                         wait_s: float = 30.0) -> dict[TopicPartition, int]:
    """The group's committed offset per partition (-1: none), once no transaction holds any of
    them pending (bounded by `wait_s`, then OffsetsNotStable). With `partitions` None, every
    partition the group has an offset for."""
    deadline = time.monotonic() + wait_s
    with ControlClient(dict(config)) as control:
        while True:
            answer = control.group_offsets(group, partitions, require_stable=True)
            codes = {tp: p.error_code for tp, p in answer.partitions.items() if p.error_code}
            if answer.error_code == 0 and not codes:
                return {tp: p.offset for tp, p in answer.partitions.items()}
            if answer.error_code not in (0, _UNSTABLE) or set(codes.values()) - {_UNSTABLE}:
                raise AssertionError(f"OffsetFetch of group {group!r}: "
                                     f"{error_name(answer.error_code)} "
                                     f"{ {tp: error_name(c) for tp, c in codes.items()} }")
            if time.monotonic() >= deadline:
                raise OffsetsNotStable(f"group {group!r}: offsets of {sorted(codes)} still "
                                       f"pending after {wait_s} s")
            time.sleep(0.1)
