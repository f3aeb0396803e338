"""A micro-batch's source offsets, committed to a consumer group with it (`twopc.commitSourceOffsets`,
KIP-618 / KIP-656 style; docs/spark.md, "Source offsets"; docs/design.md section 9).

The driver knows, before its intent, the batch's end offsets (Spark's offsets log). They move the
group past the batch's source records: a consumer failing over from the group skips those records,
so the group must move only once every record written from them is visible, and never backwards.

The rule (issue 30, item 2, and the torture suite's seed 20261134): the offsets go in a transaction
of their own on the id `alone_id` (`{prefix}-offsets`, outside the tasks' pools), committed only
after the batch's outcome record *and* a check of its markers proved the batch visible; a
`offsets_committed` record then says so. A batch's transactions answering committed is not enough:
that answer is the coordinator's decision, and a broker killed mid-commit can drop the markers, so
that a later abort from outside ends the committed records as aborted (a stranded commit,
twopc/driver/stranded.py). The intent names the offsets and their id (`deferred`), so that a call
cut short after the outcome record leaves them for the next call, which checks and moves them.

`plan_offsets` (twopc/protocol/plans.py) decides which batch's end offsets the group takes:
the newest committed batch with offsets not yet moved, with no earlier batch left unproven
(pending, partial, lost after its intent, or held as a stranded commit) before it. Offsets are end
offsets, so moving to a batch's covers every earlier one.

Before the intent the driver begins that transaction and adds the offsets to it (so the cluster's
refusal, an unknown source topic or a group with members, aborts the batch whole, nothing of it
visible), and ends it after the proof (twopc/driver/source_offsets.py). A call that cannot end it
fences it; the next call does the whole transaction again (`commit_alone`), always safe.

Logs written before this rule name a *carrier* among the batch's own transactions (the one the
coordinator committed last) or, for a batch without records, `alone_id` with the offsets committed
before the outcome record: those intents are still settled as they were (`carrier_action`,
settle.py).

Pure; the requests are in twopc/driver/source_offsets.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from twopc.control.errors import error_name
from twopc.errors import TwopcError
from twopc.protocol import plain as pd
from twopc.protocol.enums import TextEnum
from twopc.protocol.verdicts import Fate

if TYPE_CHECKING:
    pass

# (topic, partition, offset): the offset is the next one to read, as a consumer commits it.
TopicOffset = tuple[str, int, int]


class SourceOffsetsError(TwopcError):
    """A micro-batch's source offsets could not be read, or could not be committed with it."""


class SourceOffsetsRefused(SourceOffsetsError):
    """The cluster refused to take the offsets into the batch's transaction: the batch was aborted
    whole (nothing of it visible, the group's offsets unchanged)."""

    def __init__(self, batch: str, group: str, reason: str) -> None:
        self.batch = batch
        self.group = group
        self.reason = reason
        super().__init__(
            f"batch {batch} was not committed and its transactions were fenced: the source offsets "
            f"could not be added to its transaction for group {group!r}: {reason}. Nothing of the "
            "batch is visible and the group's offsets did not move; fix the cause and restart the "
            "query (it re-runs the batch)")


@dataclass(frozen=True)
class SourceOffsets:
    """The end offsets of a micro-batch per source partition, for consumer group `group`.

    `carrier`: the transactional id whose transaction carries them (recorded in the intent): the
    id of their own transaction (`alone_id`), or, in intents written before issue 30 item 2, one
    of the batch's own transactions. None before one is chosen (and in intents of batches without
    records written before issue 30, item 6, committed with a plain OffsetCommit).
    `deferred`: committed on `carrier` only after the batch is proven visible, and recorded then
    (every intent written since issue 30 item 2); False in older intents."""

    group: str
    offsets: tuple[TopicOffset, ...]
    carrier: str | None = None
    deferred: bool = False

    def __post_init__(self) -> None:
        if not self.group:
            raise ValueError("a consumer group id must not be empty")
        seen: set[tuple[str, int]] = set()
        for topic, partition, offset in self.offsets:
            if (topic, partition) in seen:
                raise ValueError(f"{topic}-{partition} appears twice in the source offsets")
            seen.add((topic, partition))
            if offset < 0 or partition < 0:
                raise ValueError(f"{topic}-{partition}: offset {offset} cannot be committed")

    def with_carrier(self, carrier: str | None) -> SourceOffsets:
        return replace(self, carrier=carrier)

    def deferred_on(self, prefix: str) -> SourceOffsets:
        """These offsets as an intent names them: their own transaction on `alone_id(prefix)`,
        committed once the batch is proven visible."""
        return replace(self, carrier=alone_id(prefix), deferred=True)

    def as_dict(self) -> dict[tuple[str, int], int]:
        return {(t, p): o for t, p, o in self.offsets}

    def to_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"group": self.group,
                               "offsets": [[t, p, o] for t, p, o in self.offsets],
                               "carrier": self.carrier}
        if self.deferred:
            obj["deferred"] = True
        return obj

    @classmethod
    def from_obj(cls, obj: Any) -> SourceOffsets:
        """Read stored offsets back strictly (twopc/plain.py); ValueError names the field."""
        obj = pd.mapping(obj, "source offsets")
        rows = []
        for raw in pd.items(pd.field(obj, "offsets", "source offsets' offsets"), "offsets"):
            topic, partition, offset = pd.row(raw, "source offset", 3)
            rows.append((pd.text(topic, "source topic"),
                         pd.integer(partition, "source partition", 0, pd.INT32_MAX),
                         pd.integer(offset, "source offset")))
        deferred = obj.get("deferred", False)
        if not isinstance(deferred, bool):
            raise ValueError(f"source offsets' deferred must be true or false, not {deferred!r:.40}")
        return cls(pd.text(pd.field(obj, "group", "source offsets' group"), "group"), tuple(rows),
                   pd.opt_text(obj.get("carrier"), "carrier"), deferred)


def normalized(group: str, offsets: Iterable[TopicOffset]) -> SourceOffsets:
    return SourceOffsets(group, tuple(sorted(offsets)))


# ---- Spark's offsets log ------------------------------------------------------------------------

_VOID = "-"  # a source without an offset in this batch


def parse_spark_offsets(text: str, where: str) -> tuple[TopicOffset, ...]:
    """The end offsets of the Kafka sources in one file of Spark's offsets log
    (`<checkpointLocation>/offsets/<batchId>`): a version line `v1` or `v2`, a metadata line, then
    one line per source: its offset's JSON (`v1`; `-` for none) or `<source id>:<JSON>` (`v2`).

    Spark's Kafka source writes `{"topic": {"partition": offset, ...}, ...}`; other sources' lines
    have another shape and are passed over. The same partition in two sources must agree.
    SourceOffsetsError names the file and the problem."""
    lines = [ln.strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    if len(lines) < 2 or lines[0] not in ("v1", "v2"):
        head = lines[0] if lines else "an empty file"
        raise SourceOffsetsError(f"{where} is not a Spark offsets log file of version v1 or v2 "
                                 f"(it starts with {head[:40]!r})")
    found: dict[tuple[str, int], int] = {}
    for line in lines[2:]:
        raw = line.split(":", 1)[1] if lines[0] == "v2" and ":" in line else line
        if raw == _VOID:
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SourceOffsetsError(f"{where}: a source offset is not JSON ({exc}): "
                                     f"{raw[:200]!r}") from None
        for (topic, partition), offset in (_kafka_offsets(value) or {}).items():
            if found.setdefault((topic, partition), offset) != offset:
                raise SourceOffsetsError(
                    f"{where}: two Kafka sources read {topic}-{partition} and end at different "
                    f"offsets ({found[(topic, partition)]} and {offset}); one consumer group "
                    "cannot hold both: read the topic once")
    if not found:
        raise SourceOffsetsError(
            f"{where} names no offsets of Spark's Kafka source: twopc.commitSourceOffsets needs a "
            "query that reads Kafka (spark.readStream.format('kafka'))")
    bad = sorted((tp, o) for tp, o in found.items() if o < 0)
    if bad:
        raise SourceOffsetsError(f"{where}: Spark's offsets log holds unresolved offsets {bad[:5]}"
                                 " (negative): they cannot be committed to a group")
    return tuple(sorted((t, p, o) for (t, p), o in found.items()))


def _kafka_offsets(value: Any) -> dict[tuple[str, int], int] | None:
    """`{"topic": {"0": 12, ...}}` -> {(topic, 0): 12}; None for any other shape."""
    if not isinstance(value, dict) or not value:
        return None
    out: dict[tuple[str, int], int] = {}
    for topic, parts in value.items():
        if not isinstance(parts, dict) or not parts:
            return None
        for partition, offset in parts.items():
            if not (isinstance(partition, str) and partition.isdigit()) or \
                    isinstance(offset, bool) or not isinstance(offset, int):
                return None
            out[(str(topic), int(partition))] = offset
    return out


# ---- which transaction carries them -------------------------------------------------------------


class CarrierAction(TextEnum):
    """What settling does with the carrier of an intent written before issue 30 item 2 (one of
    the batch's own transactions holding the offsets)."""

    COMMIT = "commit"  # every other transaction of the batch is proven committed
    FENCE = "fence"  # another was aborted: the group must not move past its source records
    WAIT = "wait"  # another is not proven either way: leave the carrier open, nothing guessed


def carrier_action(others: Iterable[Fate]) -> CarrierAction:
    """What to do with an open carrier, given the fates of the batch's other transactions.

    The carrier moves the group past the batch's source records; a consumer failing over from
    the group then skips them. So it commits only once every other transaction of the batch is
    proven committed; if one was aborted (the earliest tasks' transactions time out first), the
    carrier is fenced and the offsets move only with the repair that makes every record visible.
    """
    fates = list(others)
    if any(f is Fate.ABORTED for f in fates):
        return CarrierAction.FENCE
    if all(f is Fate.COMMITTED for f in fates):
        return CarrierAction.COMMIT
    return CarrierAction.WAIT


def alone_id(prefix: str) -> str:
    """The id whose transactions carry a query's source offsets: `{prefix}-offsets`, outside the
    tasks' pools. A driver that was paused may still send its InitProducerId on this id after
    another driver moved on (source_offsets.py `commit_alone` then finds the log moved and stops);
    on a pool id that request could abort a later batch's pre-committed task transaction, here it
    can at most abort another offsets transaction in flight, which then fails loud and is done
    again by the next call (its batch's offsets are recorded as moved only after it)."""
    return f"{prefix}-offsets"


def own_transaction(offsets: SourceOffsets | None, has_records: bool) -> tuple[str, ...]:
    """The id of the offsets' own transaction that an intent names (besides its handles): a
    batch's without records, or any batch's since issue 30 item 2 (`deferred`). Empty when the
    offsets ride in one of the batch's transactions (older intents) or there are none."""
    if offsets is None or offsets.carrier is None:
        return ()
    return (offsets.carrier,) if offsets.deferred or not has_records else ()


def needs_offsets(recorded: SourceOffsets | None, visible_ids: Iterable[str]) -> bool:
    """Must the commit of a partly visible batch's re-run carry the offsets again? Not if the
    visible part already did (a carrier of an intent written before issue 30 item 2 committed)."""
    if recorded is None or recorded.carrier is None:
        return True
    return recorded.carrier not in set(visible_ids)


# ---- the broker's answers -----------------------------------------------------------------------

_GROUP_HAS_MEMBERS = frozenset({"ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID",
                                "REBALANCE_IN_PROGRESS", "STALE_MEMBER_EPOCH",
                                "FENCED_MEMBER_EPOCH", "GROUP_ID_NOT_FOUND"})
_TXN_GONE = frozenset({"INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED", "INVALID_TXN_STATE",
                       "TRANSACTION_ABORTABLE", "INVALID_PRODUCER_ID_MAPPING",
                       "UNKNOWN_PRODUCER_ID"})


def explain(code: int, group: str, where: str) -> str:
    """What an error answer means for the offsets of `group` (at `where`) and what to do."""
    name = error_name(code)
    if name == "UNKNOWN_TOPIC_OR_PARTITION":
        return (f"{where}: UNKNOWN_TOPIC_OR_PARTITION: the cluster written to keeps group offsets "
                "only for topics and partitions it has. With a source on another cluster, create "
                "a topic of the same name with at least as many partitions there (a mirror of it), "
                "or drop twopc.commitSourceOffsets")
    if name in _GROUP_HAS_MEMBERS:
        return (f"{where}: {name}: group {group!r} has active members; twopc commits its offsets "
                "as a group without members, so give it a group id that no running consumer uses")
    if name == "GROUP_AUTHORIZATION_FAILED":
        return f"{where}: {name}: grant READ on group {group!r} to the writing principal"
    if name == "TOPIC_AUTHORIZATION_FAILED":
        return f"{where}: {name}: grant READ on the source topic on the cluster written to"
    if name in _TXN_GONE:
        return (f"{where}: {name}: the transaction was fenced or aborted meanwhile (another "
                "process holds the id, or it timed out)")
    return f"{where}: {name}"


def refusals(answers: Mapping[tuple[str, int], int], wanted: Sequence[TopicOffset],
             group: str) -> list[str]:
    """Every partition of `wanted` that a TxnOffsetCommit/OffsetCommit answer did not accept."""
    out: list[str] = []
    for topic, partition, _ in wanted:
        code = answers.get((topic, partition))
        if code is None:
            out.append(f"{topic}-{partition}: no answer")
        elif code != 0:
            out.append(explain(code, group, f"{topic}-{partition}"))
    return out


# ---- asking the broker ----------------------------------------------------------------------------


