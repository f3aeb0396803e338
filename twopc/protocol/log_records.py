"""The kinds of record twopc keeps in its checkpoint log, as versioned plain data.

Every body is a msgpack-able dict with ``kind`` and ``v`` (the body format version): the log outlives
code versions, so an unknown kind or version stops the reader with the record named, never skipped.

Records that end an intent name it by sequence number (``intent_seq``): a reader can then prove that
each ``committed``/``partial``/``aborted`` ends exactly the open intent it claims to.

Body versions: 1 for every kind; 2 only for a ``prepared`` record that carries source offsets
(twopc.commitSourceOffsets), so that code which does not know them refuses such a log instead of
rolling it forward without them; 3 for one whose offsets are committed after the batch is proven
visible (`SourceOffsets.deferred`, issue 30 item 2), which code that would commit them with the
batch's own transactions must refuse. All three are read.

Design: docs/design.md section 6.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from twopc.protocol import plain as pd
from twopc.protocol.handle import Handle, HandleFormatError
from twopc.protocol.offsets import SourceOffsets
from twopc.protocol.owner import Owner, OwnerKind

VERSION = 1
VERSION_OFFSETS = 2  # a prepared record with source offsets
VERSION_DEFERRED = 3  # a prepared record whose source offsets move after the batch is proven
_READS = (VERSION, VERSION_OFFSETS, VERSION_DEFERRED)


class RecordFormatError(ValueError):
    """A body is not one of twopc's record kinds (or not this version of it)."""


@dataclass(frozen=True)
class Prepared:
    """The intent: batch ``batch`` commits exactly these handles. This record is the decision.

    ``offsets``: the batch's source offsets and the handle whose transaction carries them (None
    without twopc.commitSourceOffsets)."""

    batch: str
    handles: tuple[Handle, ...]
    offsets: SourceOffsets | None = None


@dataclass(frozen=True)
class Committed:
    """Every handle of the intent committed; ``orphans`` (open ids of the pool it does not name:
    losing attempts, tasks that died unreported) get fenced. Stored under the body key "losers".

    ``intent_seq`` is None only for a batch that wrote no rows at all (nothing to commit).
    """

    batch: str
    intent_seq: int | None
    orphans: tuple[str, ...]


@dataclass(frozen=True)
class Partial:
    """Recovery proved that some handles of the intent committed and the others aborted."""

    batch: str
    intent_seq: int
    committed: tuple[str, ...]
    aborted: tuple[str, ...]


@dataclass(frozen=True)
class Aborted:
    """These handles are not committed and get fenced.

    With ``intent_seq`` it ends that intent (none of it committed); without, it only records a fence
    (a failed guard, Spark's abort(), a rejected re-run) and the batch keeps its state.
    """

    batch: str
    handles: tuple[Handle, ...]
    reason: str
    intent_seq: int | None


@dataclass(frozen=True)
class Duplicates:
    """A re-run's transactions for data already committed: fenced, never committed."""

    batch: str
    ids: tuple[str, ...]


@dataclass(frozen=True)
class Orphans:
    """Open transactions of the prefix that no pending record names: fenced by recovery."""

    ids: tuple[str, ...]


@dataclass(frozen=True)
class RollForward:
    """Recovery is about to commit these open handles of recorded intents (names them first), and
    the source offsets of recorded batches without records in transactions of their own on these
    ids (source_offsets.py `commit_alone`)."""

    ids: tuple[str, ...]


@dataclass(frozen=True)
class Released:
    """Recovery is about to end committed transactions whose commit markers the broker dropped
    (a broker killed mid-commit): a markers-only commit on each id over its stuck partitions.

    ``partitions`` holds (transactional id, topic, partition); ``batches`` the batches whose
    committed handles were stuck there. Written before the releases, it holds its ids (no task
    takes them) until a ``stranded`` record clears them: a release that failed, or one cut short
    by a crash, is retried by a later check.
    """

    batches: tuple[str, ...]
    ids: tuple[str, ...]
    partitions: tuple[tuple[str, str, int], ...]


@dataclass(frozen=True)
class Stranded:
    """What a check of the committed transactions' markers left (stranded.py).

    ``held``: (batch, transactional id, reason) of committed transactions that still hold
    partitions open and were not released (the release failed, the markers may still be on their
    way, a live writer holds the id, or the partitions could not be read). No task takes a held
    id until a later check clears it. ``cleared``: held ids now found released or settled.
    """

    held: tuple[tuple[str, str, str], ...]
    cleared: tuple[str, ...]


@dataclass(frozen=True)
class Lease:
    """A run of batch job ``job`` holds its family's log (the jobs of one prefix share it) until
    ``until_ms`` on its driver's wall clock: no other job of the family may start meanwhile, since
    its recovery would settle or fence what this run has not recorded yet (docs/design.md section
    5). A run renews it with another record; ``until_ms`` 0 ends it (the run's release, after
    everything its commit sends; a ``committed`` record does not). ``run`` tells runs of one job
    apart; ``since_ms`` and ``holder`` (host and process) are for the refusal's message.
    """

    job: str
    run: str
    until_ms: int
    since_ms: int
    holder: str


@dataclass(frozen=True)
class Copying:
    """Copy-forward is about to write the records of ``sources`` (the batch's decided handles the
    broker aborted: transactional id, producer id, epoch) again, in new transactions on ``ids``
    (protocol/copies.py). Written before those ids' producers start (starting one fences the
    id's open transaction); changes no batch's state: the copies commit through a `prepared`
    record of their own, and a copy cut short by a crash is an open transaction no record
    commits (fenced as an orphan)."""

    batch: str
    ids: tuple[str, ...]
    sources: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class OffsetsCommitted:
    """The consumer group took batch ``batch``'s source offsets (its intent's), in their own
    transaction, after every batch up to it was proven visible (protocol/offsets.py): the
    offsets of ``batch`` and of every batch intended before it are moved, never to be committed
    again (an older batch's would move the group back). ``intent_seq``: that batch's intent, the
    bound (its records may be purged before this one's)."""

    batch: str
    intent_seq: int


@dataclass(frozen=True)
class Resolved:
    """The operator's explicit decision for a stuck batch ("committed" or "aborted")."""

    batch: str
    decision: str
    note: str


BatchRecord = Prepared | Committed | Partial | Aborted | Duplicates | Resolved
LogRecord = (BatchRecord | Orphans | RollForward | Released | Stranded | Lease | Copying
             | OffsetsCommitted)

RESOLVE_COMMITTED = "committed"  # keep what is visible; the re-run writes nothing more
RESOLVE_ABORTED = "aborted"  # treat as not committed; the re-run writes the whole batch again
DECISIONS = (RESOLVE_COMMITTED, RESOLVE_ABORTED)


def _ids(values: Sequence[str]) -> list[str]:
    return [str(v) for v in values]


def to_body(record: LogRecord) -> dict[str, Any]:
    """The msgpack-able body stored in the log."""
    body: dict[str, Any]
    if isinstance(record, Prepared):
        body = {"kind": "prepared", "batch": record.batch,
                "handles": [h.to_obj() for h in record.handles]}
        if record.offsets is not None:
            body["offsets"] = record.offsets.to_obj()
            body["v"] = VERSION_DEFERRED if record.offsets.deferred else VERSION_OFFSETS
            return body
    elif isinstance(record, Committed):
        body = {"kind": "committed", "batch": record.batch, "intent": record.intent_seq,
                "losers": _ids(record.orphans)}  # the key of format 1: never renamed
    elif isinstance(record, Partial):
        body = {"kind": "partial", "batch": record.batch, "intent": record.intent_seq,
                "committed": _ids(record.committed), "aborted": _ids(record.aborted)}
    elif isinstance(record, Aborted):
        body = {"kind": "aborted", "batch": record.batch, "intent": record.intent_seq,
                "handles": [h.to_obj() for h in record.handles], "reason": record.reason}
    elif isinstance(record, Duplicates):
        body = {"kind": "duplicates", "batch": record.batch, "ids": _ids(record.ids)}
    elif isinstance(record, Orphans):
        body = {"kind": "orphans", "ids": _ids(record.ids)}
    elif isinstance(record, RollForward):
        body = {"kind": "rollforward", "ids": _ids(record.ids)}
    elif isinstance(record, Released):
        body = {"kind": "released", "batches": _ids(record.batches), "ids": _ids(record.ids),
                "partitions": [[t, topic, int(p)] for t, topic, p in record.partitions]}
    elif isinstance(record, Copying):
        body = {"kind": "copying", "batch": record.batch, "ids": _ids(record.ids),
                "sources": [[t, int(pid), int(epoch)] for t, pid, epoch in record.sources]}
    elif isinstance(record, Stranded):
        body = {"kind": "stranded", "held": [[b, t, why] for b, t, why in record.held],
                "cleared": _ids(record.cleared)}
    elif isinstance(record, OffsetsCommitted):
        body = {"kind": "offsets_committed", "batch": record.batch, "intent": record.intent_seq}
    elif isinstance(record, Lease):
        body = {"kind": "lease", "job": record.job, "run": record.run,
                "until_ms": int(record.until_ms), "since_ms": int(record.since_ms),
                "holder": record.holder}
    else:
        body = {"kind": "resolved", "batch": record.batch, "decision": record.decision,
                "note": record.note}
    body["v"] = VERSION
    return body


def from_body(body: dict[str, Any]) -> LogRecord:
    """Read a stored body back; RecordFormatError for anything not written by this format: every
    field must hold exactly the type and range its writer puts there (twopc/plain.py)."""
    try:
        version = pd.version(body.get("v"), _READS, "record format version")
    except ValueError as exc:
        raise RecordFormatError(str(exc)) from exc
    kind = body.get("kind")
    if version != VERSION and kind != "prepared":
        raise RecordFormatError(f"a {kind!r:.40} record of format {version}: only prepared has one")

    def get(key: str) -> Any:
        return pd.field(body, key, f"field {key!r}")

    try:
        if kind == "prepared":
            raw = body.get("offsets") if version != VERSION else None
            if version != VERSION and raw is None:
                raise RecordFormatError(f"a prepared record of format {version} without source "
                                        "offsets")
            offsets = None if raw is None else SourceOffsets.from_obj(raw)
            if offsets is not None and offsets.deferred != (version == VERSION_DEFERRED):
                raise RecordFormatError(f"a prepared record of format {version} with source "
                                        f"offsets {'' if offsets.deferred else 'not '}deferred")
            return Prepared(_batch(get("batch")), _handles(get("handles")), offsets)
        if kind == "committed":
            return Committed(_batch(get("batch")), _opt_int(get("intent")), _tuple(get("losers")))
        if kind == "partial":
            return Partial(_batch(get("batch")), _seq(get("intent")), _tuple(get("committed")),
                           _tuple(get("aborted")))
        if kind == "aborted":
            return Aborted(_batch(get("batch")), _handles(get("handles")),
                           pd.text(get("reason"), "reason"), _opt_int(get("intent")))
        if kind == "duplicates":
            return Duplicates(_batch(get("batch")), _tuple(get("ids")))
        if kind == "orphans":
            return Orphans(_tuple(get("ids")))
        if kind == "rollforward":
            return RollForward(_tuple(get("ids")))
        if kind == "released":
            return Released(_tuple(get("batches"), "batches"), _tuple(get("ids")),
                            tuple(_released(p) for p in pd.items(get("partitions"), "partitions")))
        if kind == "stranded":
            return Stranded(tuple(_held(h) for h in pd.items(get("held"), "held")),
                            _tuple(get("cleared")))
        if kind == "lease":
            return Lease(pd.text(get("job"), "job"), pd.text(get("run"), "run"),
                         pd.integer(get("until_ms"), "until_ms"),
                         pd.integer(get("since_ms"), "since_ms"), pd.text(get("holder"), "holder"))
        if kind == "copying":
            return Copying(_batch(get("batch")), _tuple(get("ids")),
                           tuple(_source(s) for s in pd.items(get("sources"), "sources")))
        if kind == "offsets_committed":
            return OffsetsCommitted(_batch(get("batch")), _seq(get("intent")))
        if kind == "resolved":
            decision = pd.text(get("decision"), "decision")
            if decision not in DECISIONS:
                raise RecordFormatError(f"unknown resolution {decision!r:.40}")
            return Resolved(_batch(get("batch")), decision, pd.text(get("note"), "note"))
    except (ValueError, HandleFormatError) as exc:
        if isinstance(exc, RecordFormatError):
            raise
        raise RecordFormatError(f"bad {kind} record: {exc}") from exc
    raise RecordFormatError(f"unknown record kind {kind!r:.60}")


def binding_body(owner: Owner) -> dict[str, Any]:
    """The log's binding (in its index): the owner, stored by value."""
    return {"kind": "binding", "v": VERSION, "owner_kind": owner.kind.value,
            "owner_id": owner.owner_id, "prefix": owner.prefix}


def binding_from_body(body: dict[str, Any]) -> Owner:
    if body.get("kind") != "binding" or type(body.get("v")) is not int or body.get("v") != VERSION:
        raise RecordFormatError(f"not a binding of format {VERSION}: {body!r:.200}")
    try:
        kind = pd.text(pd.field(body, "owner_kind", "owner_kind"), "owner_kind")
        if kind not in {k.value for k in OwnerKind}:
            raise RecordFormatError(f"bad binding: owner_kind {kind!r:.40} is not query or job")
        return Owner(OwnerKind(kind), _name(pd.field(body, "owner_id", "owner_id"), "owner_id"),
                     _name(pd.field(body, "prefix", "prefix"), "prefix"))
    except ValueError as exc:
        if isinstance(exc, RecordFormatError):
            raise
        raise RecordFormatError(f"bad binding: {exc}") from exc


def _name(raw: Any, what: str) -> str:
    value = pd.text(raw, what)
    if not value:
        raise pd.PlainDataError(f"{what} is empty")
    return value


def _batch(raw: Any) -> str:
    return pd.text(raw, "batch")


def _seq(raw: Any) -> int:
    return pd.integer(raw, "intent record number (intent)")


def _released(raw: Any) -> tuple[str, str, int]:
    tid, topic, partition = pd.row(raw, "released partition", 3)
    return (pd.text(tid, "released transactional id"), pd.text(topic, "released topic"),
            pd.integer(partition, "released partition", 0, pd.INT32_MAX))


def _held(raw: Any) -> tuple[str, str, str]:
    batch, tid, why = pd.row(raw, "held entry", 3)
    return (pd.text(batch, "held batch"), pd.text(tid, "held transactional id"),
            pd.text(why, "held reason"))


def _source(raw: Any) -> tuple[str, int, int]:
    tid, pid, epoch = pd.row(raw, "copy source", 3)
    return (pd.text(tid, "copy source transactional id"),
            pd.integer(pid, "copy source producer id"),
            pd.integer(epoch, "copy source epoch", 0, pd.INT16_MAX))


def _handles(raw: Any) -> tuple[Handle, ...]:
    return tuple(Handle.from_obj(h) for h in pd.items(raw, "handles"))


def _tuple(raw: Any, what: str = "transactional ids") -> tuple[str, ...]:
    return tuple(pd.text(v, f"an entry of {what}") for v in pd.items(raw, what))


def _opt_int(raw: Any) -> int | None:
    return None if raw is None else _seq(raw)
