"""The log check of many spans at once (docs/design.md section 8, "The cost"): each partition
fetched once from its lowest span, the partitions of one leader in one Fetch request.

Run on the control client's event loop; `ControlClient.log_checks` is its synchronous face.
The decision is pure (`logcheck.decide_spans`); the single-span check and the fetch it retries
are partitions.py's.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

from twopc.control import errors as e
from twopc.control.cluster import Cluster
from twopc.control.fetch_batcher import FetchBatcher
from twopc.control.logcheck import (
    LogCheckRequest,
    LogCheckResult,
    LogOutcome,
    RangeAnswer,
    UnknownReason,
    decide_spans,
)
from twopc.control.partitions import current_topic_ids, fetch_raw, log_check_seen, topic_changed
from twopc.control.record_batches import batch_headers

# A log check's fetch covers every span of the partition from the lowest up: this many bytes
# reach the transactions of a commit of small ones in one answer (bench_endtxn.py: 64 of a few
# records over 8 partitions), and a larger first batch still comes whole (KIP-74); spans past
# the answer are fetched again from there, so the limit changes the cost, never a verdict.
SPANS_MAX_BYTES = 64 * 1024


def _failed(exc: Exception) -> LogCheckResult:
    return LogCheckResult(LogOutcome.UNKNOWN, UnknownReason.FETCH_ERROR,
                          f"{type(exc).__name__}: {exc}"[:500])


async def log_checks(cluster: Cluster, checks: Sequence[LogCheckRequest],
                     budget_s: float | None = None) -> list[LogCheckResult]:
    """`log_check` of every span, answers in the order asked: one fetch per partition answers
    every span its returned batches reach (`logcheck.decide_spans`), from the lowest span up,
    and the partitions of one leader share each Fetch request."""
    # The recorded topic ids are checked against one Metadata request for all the spans (one per
    # span cost a whole metadata answer each: 2 per transaction in a recovery of 3,000). Each
    # fetch still names the topic id, so a topic re-created after this read answers
    # UNKNOWN_TOPIC_ID there.
    named = {c.topic for c in checks if c.topic_id is not None}
    try:
        now = await current_topic_ids(cluster, named) if named else {}
    except e.ControlError as exc:
        return [_failed(exc) for _ in checks]
    out: list[LogCheckResult | None] = [None] * len(checks)
    by_partition: dict[tuple[str, int, str | None], list[int]] = {}
    for i, c in enumerate(checks):
        changed = None if c.topic_id is None else topic_changed(c.topic_id, now.get(c.topic))
        if changed is not None:
            out[i] = LogCheckResult(LogOutcome.UNKNOWN, UnknownReason.TOPIC_CHANGED, changed)
        else:
            by_partition.setdefault((c.topic, c.partition, c.topic_id), []).append(i)
    batcher = FetchBatcher(cluster)

    spread = asyncio.Semaphore(64)

    async def partition(topic: str, index: int, topic_id: str | None, asked: list[int]) -> None:
        tid = uuid.UUID(topic_id) if topic_id else None
        pending = sorted(asked, key=lambda i: checks[i].offset)
        shared = [True]  # this partition's lowest fetch still goes in the leader's request

        async def ranged(at: int, lowest: bool) -> RangeAnswer | None:
            """The answer of a fetch from `at`; None: out of range."""
            while True:
                via = batcher if lowest and shared[0] else None
                try:
                    if via is None:
                        async with spread:
                            code, p = await fetch_raw(cluster, topic, index, at, tid,
                                                      SPANS_MAX_BYTES, budget_s=budget_s)
                    else:
                        code, p = await fetch_raw(cluster, topic, index, at, tid,
                                                  SPANS_MAX_BYTES, budget_s=budget_s, via=via)
                except e.ControlError:
                    if via is None:
                        raise
                    # A shared request that failed as a whole (an answer that cannot be read)
                    # is no verdict on this partition: asked alone, its own answer counts.
                    shared[0] = False
                    continue
                if code == e.ERROR_CODES["OFFSET_OUT_OF_RANGE"]:
                    return None
                headers = tuple(batch_headers(p.records)) if p is not None and p.records else ()
                if (via is not None and code == 0 and p is not None and not headers
                        and at < p.last_stable_offset):
                    # Sharing a request, a partition gets nothing when its first batch does not
                    # fit in what the earlier partitions left (ReplicaManager: only the first
                    # partition with data gets a batch larger than its limit): alone, it does.
                    shared[0] = False
                    continue
                return RangeAnswer(
                    topic, index, at, None if code == 0 else e.error_name(code),
                    p.last_stable_offset if p else -1, p.high_watermark if p else -1,
                    p.log_start_offset if p else -1,
                    tuple(p.aborted_transactions or ()) if p else (), headers)

        stride = 0
        try:
            while pending:
                # Spans far apart (large transactions) are not reached by one answer: once the
                # first answer shows how many it reaches, later rounds also fetch from every
                # stride-th span at once, as many fetches as before in flight.
                starts = pending[:1] if stride == 0 else pending[::stride][:16]
                got = await asyncio.gather(
                    *(ranged(checks[i].offset, k == 0) for k, i in enumerate(starts)),
                    return_exceptions=True)
                for r in got:
                    if isinstance(r, BaseException) and (
                            r is got[0] or not isinstance(r, e.ControlError)):
                        raise r
                answers = [r for r in got if not isinstance(r, BaseException)]
                if any(r is None for r in answers):
                    # Below the log start or past its end: each span asked alone, as ever.
                    for i in pending:
                        c = checks[i]
                        try:
                            out[i] = await log_check_seen(cluster, topic, index, c.offset,
                                                          c.producer_id, c.epoch, topic_id,
                                                          topic_id, budget_s)
                        except e.ControlError as exc:
                            out[i] = _failed(exc)
                    return
                for k, answer in enumerate(r for r in answers if r is not None):
                    here = [i for i in pending if checks[i].offset >= answer.fetch_offset]
                    verdicts = decide_spans(answer, [(checks[i].offset, checks[i].producer_id,
                                                      checks[i].epoch) for i in here])
                    reached = 0
                    for i, verdict in zip(here, verdicts, strict=True):
                        if verdict is not None:
                            out[i] = verdict
                            reached += 1
                    if k == 0:
                        stride = max(reached, 1)
                    pending = [i for i in pending if out[i] is None]
        except e.ControlError as exc:  # this partition's spans are unknown; the others count
            for i in pending:
                out[i] = _failed(exc)

    await asyncio.gather(*(partition(t, p, tid, asked)
                           for (t, p, tid), asked in by_partition.items()))
    return [r if r is not None else LogCheckResult(
        LogOutcome.UNKNOWN, UnknownReason.FETCH_ERROR, "not answered") for r in out]
