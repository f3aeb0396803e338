"""Requests to a consumer group's coordinator (twopc.commitSourceOffsets; group_messages.py).

Design: docs/design.md section 3.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from twopc.control import errors as e
from twopc.control import group_messages as gm
from twopc.control.cluster import Backoff, Cluster
from twopc.control.errors import BrokerConnectionError, RetriesExhaustedError
from twopc.control.messages import ApiKey

T = TypeVar("T")


async def group_call(cluster: Cluster, group_id: str, encode: Callable[[int], bytes],
                      decode: Callable[[int, Any], T], api: ApiKey) -> T:
    """One request to the group's coordinator, retried (within the retry settings) while the
    coordinator moves, loads or is unreachable, or a partition answers a retriable error."""
    backoff = Backoff(cluster.settings)
    last = e.ERROR_CODES["NETWORK_EXCEPTION"]
    while True:
        node: int | None = None
        try:
            node = await cluster.group_coordinator(group_id)
            conn = await cluster.connection(node)
            version = conn.version(api)
            result = decode(version, await conn.request(api, version, encode(version)))
        except BrokerConnectionError:
            cluster.forget_group_coordinator(group_id)
            if node is not None:
                cluster.drop_node(node)
        else:
            retriable = [c for c in codes_of(result)
                         if c in e.COORDINATOR_RETRIABLE or c in e.RETRY_SAME]
            if not retriable:
                return result
            last = retriable[0]
            if last in e.COORDINATOR_RETRIABLE:
                cluster.forget_group_coordinator(group_id)
        if not await backoff.wait():
            raise RetriesExhaustedError(last, f"{api.name} of group {group_id!r}")



def codes_of(result: object) -> list[int]:
    if isinstance(result, gm.GroupOffsetsResponse):
        return [result.error_code, *(p.error_code for p in result.partitions.values())]
    if isinstance(result, dict):
        return list(result.values())
    return [int(result)]  # type: ignore[call-overload]
