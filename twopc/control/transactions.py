"""Requests to transaction coordinators: describe, list, end, fence and release transactions.

Functions over one `Cluster` (connections, cached coordinators, retry settings), run on the control
client's event loop; `ControlClient` is their synchronous face. Each request goes to the
transactional id's coordinator (FindCoordinator, key type 1) and is retried while the coordinator
moves or loads (docs/control.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from twopc.control import errors as e
from twopc.control import txn_messages as tm
from twopc.control.cluster import Backoff, Cluster, gather_dict
from twopc.control.errors import BrokerConnectionError, KafkaApiError, RetriesExhaustedError
from twopc.control.messages import ApiKey
from twopc.control.outcomes import (
    EndTxnOutcome,
    EndTxnRequest,
    FenceResult,
    ReleaseResult,
    TransactionDescription,
    TransactionListing,
    TxnState,
    classify_end_txn,
)
from twopc.control.protocol import Reader

END_TXN_MAX_VERSION = 4


def prefix_pattern(prefix: str) -> str:
    """ListTransactions v2's regular expression for ids starting with `prefix`."""
    # Escape every non-alphanumeric ASCII character: valid in both Java regex and RE2.
    body = "".join(c if c.isalnum() or ord(c) > 127 else "\\" + c for c in prefix)
    return f"^{body}.*"


async def describe_transactions(cluster: Cluster, ids: list[str]) -> dict[str, TransactionDescription]:
    out: dict[str, TransactionDescription] = {}
    for tid, (node, entry) in (await _described(cluster, ids,
                                                 tm.decode_describe_transactions)).items():
        if entry.error_code:  # TRANSACTIONAL_ID_NOT_FOUND: `_described` raises on any other
            out[tid] = TransactionDescription(tid, TxnState.UNKNOWN_ID, -1, -1, -1, -1, (),
                                              entry.error_code, node)
        else:
            out[tid] = TransactionDescription(
                tid, TxnState.parse(entry.state), entry.producer_id, entry.producer_epoch,
                entry.timeout_ms, entry.start_ms, entry.partitions, 0, node)
    return out


async def open_among(cluster: Cluster, ids: list[str]) -> list[str]:
    """The ids among `ids` whose transaction is open (Ongoing), in `ids`' order: a batch pool's
    hundreds of ids on the commit path, so each answer is read for the state alone
    (`decode_describe_states`: ~1 us an id, half the full decoder's) and no description is built."""
    described = await _described(cluster, ids, tm.decode_describe_states)
    return [tid for tid in ids
            if not described[tid][1].error_code and described[tid][1].state == _ONGOING]


_ONGOING = TxnState.ONGOING.value
Entry = TypeVar("Entry", tm.TxnStateEntry, tm.TxnStateBrief)


async def _described(cluster: Cluster, ids: list[str],
                     decode: Callable[[int, Reader], list[Entry]]
                     ) -> dict[str, tuple[int, Entry]]:
    """Each id's DescribeTransactions entry (as `decode` reads it) with the coordinator that
    answered it, retried while coordinators move or load; an entry is either a success or
    TRANSACTIONAL_ID_NOT_FOUND."""
    out: dict[str, tuple[int, Entry]] = {}
    todo = ids
    backoff = Backoff(cluster.settings)
    last = 0
    while todo:
        by_node: dict[int, list[str]] = {}
        for tid, node in (await cluster.coordinators(todo)).items():
            by_node.setdefault(node, []).append(tid)
        replies = await asyncio.gather(
            *(describe_at(cluster, node, batch, decode) for node, batch in by_node.items()),
            return_exceptions=True)
        retry: list[str] = []
        for (node, batch), reply in zip(by_node.items(), replies, strict=True):
            if isinstance(reply, BrokerConnectionError):
                cluster.drop_node(node)
                retry += batch
                last = 13
                continue
            if isinstance(reply, BaseException):
                raise reply
            for entry in reply:
                if entry.error_code in e.COORDINATOR_RETRIABLE:
                    cluster.forget_coordinator(entry.transactional_id)
                    retry.append(entry.transactional_id)
                    last = entry.error_code
                elif entry.error_code not in (0, e.ERROR_CODES["TRANSACTIONAL_ID_NOT_FOUND"]):
                    raise e.api_error(entry.error_code,
                                      f"DescribeTransactions of {entry.transactional_id!r}")
                else:
                    out[entry.transactional_id] = (node, entry)
        todo = retry
        if todo and not await backoff.wait():
            raise RetriesExhaustedError(last, f"DescribeTransactions of {todo[:3]}")
    return {tid: out[tid] for tid in ids}


async def describe_at(cluster: Cluster, node: int, ids: list[str],
                      decode: Callable[[int, Reader], list[Entry]]) -> list[Entry]:
    conn = await cluster.connection(node)
    version = conn.version(ApiKey.DESCRIBE_TRANSACTIONS)
    reader = await conn.request(ApiKey.DESCRIBE_TRANSACTIONS, version,
                                tm.encode_describe_transactions(version, ids))
    return decode(version, reader)


async def list_transactions(cluster: Cluster, prefix: str | None, states: list[str],
                            producer_ids: tuple[int, ...] = ()) -> list[TransactionListing]:
    await cluster.refresh_metadata()
    nodes = sorted(cluster.brokers)
    replies = await asyncio.gather(*(list_at(cluster, n, prefix, states, producer_ids)
                                     for n in nodes))
    seen: dict[str, TransactionListing] = {}
    for node, resp in zip(nodes, replies, strict=True):
        for tid, pid, state in resp.transactions:
            if prefix is not None and not tid.startswith(prefix):
                continue  # old brokers cannot filter by id: filter here
            seen[tid] = TransactionListing(tid, pid, TxnState.parse(state), node)
    return sorted(seen.values(), key=lambda t: t.transactional_id)


async def list_at(cluster: Cluster, node: int, prefix: str | None, states: list[str],
                  producer_ids: tuple[int, ...] = ()) -> tm.ListTransactionsResponse:
    backoff = Backoff(cluster.settings)
    while True:
        conn = await cluster.connection(node)
        version = conn.version(ApiKey.LIST_TRANSACTIONS)
        pattern = prefix_pattern(prefix) if prefix and version >= 2 else None
        resp = tm.decode_list_transactions(version, await conn.request(
            ApiKey.LIST_TRANSACTIONS, version,
            tm.encode_list_transactions(version, states, pattern, producer_ids)))
        if resp.error_code == 0:
            return resp
        if resp.error_code not in e.COORDINATOR_RETRIABLE or not await backoff.wait():
            raise e.api_error(resp.error_code, f"ListTransactions at broker {node}")


async def end_all(cluster: Cluster, requests: list[EndTxnRequest],
                   precheck: bool) -> dict[str, EndTxnOutcome]:
    prior: dict[str, TransactionDescription] = {}
    if precheck and requests:
        try:
            prior = await describe_transactions(cluster, [r.transactional_id for r in requests])
        except e.ControlError:
            prior = {}  # only labels depend on it; EndTxn itself decides
    else:
        await cluster.coordinators([r.transactional_id for r in requests])
    return await gather_dict({
        r.transactional_id: end_one(cluster, r, prior.get(r.transactional_id))
        for r in requests})


async def end_one(cluster: Cluster, req: EndTxnRequest,
                   prior: TransactionDescription | None) -> EndTxnOutcome:
    tid = req.transactional_id
    code = await coordinator_call(cluster, tid, lambda v: tm.encode_end_txn(
        v, tid, req.producer_id, req.epoch, req.commit), tm.decode_end_txn,
        ApiKey.END_TXN, END_TXN_MAX_VERSION)
    return classify_end_txn(req, code, prior)


async def coordinator_call(cluster: Cluster, tid: str, encode: Any, decode: Any, api: ApiKey,
                            ceiling: int | None = None) -> Any:
    """One request to `tid`'s coordinator, retried while the coordinator moves or loads, or
    answers CONCURRENT_TRANSACTIONS. Returns the error code (or decoded response) of the
    last answer; an exhausted budget returns that retriable code for the caller to classify."""
    backoff = Backoff(cluster.settings)
    while True:
        node: int | None = None
        try:
            node = (await cluster.coordinators([tid]))[tid]
            conn = await cluster.connection(node)
            version = conn.version(api, ceiling)
            result = decode(version, await conn.request(api, version, encode(version)))
        except BrokerConnectionError:
            # The coordinator may be down: look it up again. Ending a transaction twice is
            # safe (a retry of the same ending answers NONE).
            cluster.forget_coordinator(tid)
            if node is not None:
                cluster.drop_node(node)
            result = None
            code = e.ERROR_CODES["NETWORK_EXCEPTION"]
        except RetriesExhaustedError as exc:
            return exc.code if api == ApiKey.END_TXN else raise_(exc)
        else:
            code = result if isinstance(result, int) else result.error_code
        if code in e.COORDINATOR_RETRIABLE:
            cluster.forget_coordinator(tid)
        if code not in e.COORDINATOR_RETRIABLE and code not in e.RETRY_SAME:
            return result
        if not await backoff.wait():
            return code if result is None or isinstance(result, int) else result


async def fence_all(cluster: Cluster, ids: list[str], timeout_ms: int) -> dict[str, FenceResult]:
    await cluster.coordinators(ids)
    return await gather_dict({tid: fence_one(cluster, tid, timeout_ms) for tid in ids})


async def fence_one(cluster: Cluster, tid: str, timeout_ms: int) -> FenceResult:
    resp = await coordinator_call(cluster,
        tid, lambda v: tm.encode_init_producer_id(v, tid, timeout_ms),
        tm.decode_init_producer_id, ApiKey.INIT_PRODUCER_ID)
    if isinstance(resp, int):
        return FenceResult(tid, -1, -1, e.error_name(resp))
    if resp.error_code != 0:
        return FenceResult(tid, -1, -1, e.error_name(resp.error_code))
    return FenceResult(tid, resp.producer_id, resp.producer_epoch)


# What a broker whose transaction.max.timeout.ms is below the release's asks for instead.
FALLBACK_RELEASE_TIMEOUT_MS = 60000


async def release_stranded(cluster: Cluster, tid: str, parts: tuple[tuple[str, int], ...],
                           expected_pid: int | None, timeout_ms: int) -> ReleaseResult:
    init = await fence_one(cluster, tid, timeout_ms)
    if init.error == "INVALID_TRANSACTION_TIMEOUT" and timeout_ms > FALLBACK_RELEASE_TIMEOUT_MS:
        # Refused before anything changed: the broker allows less; ask for the producer default.
        init = await fence_one(cluster, tid, FALLBACK_RELEASE_TIMEOUT_MS)
    if init.error is not None:
        return ReleaseResult(tid, -1, -1, parts, init.error, "init_producer_id")
    pid, epoch = init.producer_id, init.epoch
    if expected_pid is not None and pid != expected_pid:
        return ReleaseResult(tid, pid, epoch, parts, "PRODUCER_ID_CHANGED",
                             "init_producer_id")
    added = await coordinator_call(cluster,
        tid, lambda v: tm.encode_add_partitions_to_txn(v, tid, pid, epoch, parts),
        tm.decode_add_partitions_to_txn, ApiKey.ADD_PARTITIONS_TO_TXN,
        tm.ADD_PARTITIONS_MAX_VERSION)
    code = added if isinstance(added, int) else added.error_code
    if code != 0:
        return ReleaseResult(tid, pid, epoch, parts, e.error_name(code), "add_partitions")
    ended = await end_one(cluster, EndTxnRequest(tid, pid, epoch, True), None)
    if not ended.committed:
        return ReleaseResult(tid, pid, epoch, parts,
                             ended.error or ended.kind.value, "end_txn")
    return ReleaseResult(tid, pid, epoch, parts)



def raise_(exc: KafkaApiError) -> Any:
    raise exc
