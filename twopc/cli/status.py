"""`twopc status`: what a twopc checkpoint log says, and what the broker says of its transactions.

Read-only: it reads the log by key (no probe, no append) and asks the broker only
DescribeTransactions, ListTransactions and OffsetFetch.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from checkpoint import CheckpointError, open_log
from checkpoint.redact import redact_url
from twopc.cli._common import (
    UsageError,
    add_checkpoint_args,
    bootstrap_servers,
    client_settings,
    integer,
    number,
    print_stuck,
    spans_of,
    storage_options,
    stuck_batch,
    view_of,
)
from twopc.cli._output import emit_json, fail
from twopc.control import ControlClient, ControlError, TransactionDescription, TxnState
from twopc.driver.lease import when
from twopc.errors import InconsistentLog, TwopcError
from twopc.log.session import LogView
from twopc.protocol.clock import coordinator_now
from twopc.protocol.handle import Handle
from twopc.protocol.offsets import SourceOffsets
from twopc.protocol.plans import plan_offsets
from twopc.protocol.pool import in_pool
from twopc.protocol.state import BatchState, BatchStatus, LogState
from twopc.protocol.verdicts import pass1

EPILOG = """Shows the log's binding (query or job id, transactional id prefix), the last batches and their
state, pending batches (an intent without outcome) with each transaction's age against its timeout,
stuck batches (partly committed, or a re-run refused by DataLossError, or aborted after the intent
with the decided records awaiting a copy) with what is visible and what was lost, the consumer group
that gets the source offsets (twopc.commitSourceOffsets) with the last committed batch's end offsets,
and, with --bootstrap-servers, each pending transaction's state on the broker, the group's committed
offsets, and the open transactions of the prefix that no record names (orphans). Never writes
anything.

exit codes: 0 healthy; 1 attention needed (pending or stuck batch, orphans, a stranded commit
held, thin guard margin); 2 bad arguments, no twopc log at the URL, storage or broker unreachable.

examples:
  twopc status --checkpoint /data/chk/orders-twopc
  twopc status --checkpoint s3://bucket/chk/orders-twopc --storage-option anon=false \\
      --bootstrap-servers kafka-1:9092 -X security.protocol=SASL_SSL --json
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "status", help="a checkpoint log's batches, pending and orphaned transactions (read-only)",
        description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_checkpoint_args(p)
    p.add_argument("--bootstrap-servers", default=None, metavar="HOST:PORT[,...]",
                   type=bootstrap_servers,
                   help="also ask the broker about the transactions (DescribeTransactions)")
    p.add_argument("--batches", type=integer(0, 1_000_000, "a number of batches"), default=10,
                   help="how many recent batches to show (0: none)")
    p.add_argument("--warn-ratio", type=number(0.0, 1000.0, "a ratio"), default=0.5,
                   help="warn when an open transaction's age / timeout reaches this (default 0.5)")
    p.add_argument("--json", action="store_true", help="machine-readable output (docs/operations.md)")
    p.set_defaults(handler=_status)


# ---- what the log says ------------------------------------------------------------------------


def batch_row(b: BatchState) -> dict[str, Any]:
    return {"batch": b.batch, "status": b.status.value, "first_seq": b.first_seq,
            "last_seq": b.last_seq, "intent_seq": b.intent_seq, "transactions": len(b.intent),
            "records": sum(h.record_count for h in b.intent),
            "visible_partitions": sorted(b.committed)}


# ---- what the broker says ---------------------------------------------------------------------


def _ratio(age: int | None, timeout: int | None) -> float | None:
    return None if age is None or not timeout else round(age / timeout, 4)


def pending_txn(h: Handle, coord_now: int, desc: TransactionDescription | None,
                asked: bool) -> dict[str, Any]:
    holds = desc is not None and desc.holds(h.producer_id, h.epoch)
    start = desc.start_ms if holds and desc is not None and desc.start_ms > 0 else h.start_ms
    timeout = desc.timeout_ms if holds and desc is not None and desc.timeout_ms > 0 else h.timeout_ms
    age = max(0, coord_now - start)
    verdict = pass1(h, desc) if asked else None
    return {
        "transactional_id": h.transactional_id, "producer_id": h.producer_id, "epoch": h.epoch,
        "task_partition": h.task_partition, "attempt": h.attempt, "records": h.record_count,
        "partitions": spans_of(h), "start_ms": start, "timeout_ms": timeout, "age_ms": age,
        "age_ratio": _ratio(age, timeout),
        "open": (holds and desc is not None and desc.state is TxnState.ONGOING) if asked else None,
        "broker": None if not asked else _describe_obj(desc),
        "recovery_would": None if verdict is None else verdict.fate.value,
        "reason": "" if verdict is None else verdict.reason,
    }


def _describe_obj(d: TransactionDescription | None) -> dict[str, Any]:
    if d is None:
        return {"state": TxnState.UNKNOWN_ID.value}
    return {"state": d.state.value, "producer_id": d.producer_id, "epoch": d.producer_epoch,
            "start_ms": d.start_ms, "timeout_ms": d.timeout_ms,
            "partitions": [list(p) for p in d.partitions]}


def orphan_txn(d: TransactionDescription, now_ms: int) -> dict[str, Any]:
    age = max(0, now_ms - d.start_ms) if d.start_ms > 0 else None
    return {"transactional_id": d.transactional_id, "producer_id": d.producer_id,
            "epoch": d.producer_epoch, "state": d.state.value, "start_ms": d.start_ms,
            "timeout_ms": d.timeout_ms, "age_ms": age, "age_ratio": _ratio(age, d.timeout_ms),
            "partitions": [list(p) for p in d.partitions]}


def build_status(view: LogView, control: ControlClient | None, *, batches: int,
                 warn_ratio: float, now_ms: int,
                 figures_of: Callable[[str], dict[str, Any] | None] | None = None
                 ) -> dict[str, Any]:
    """`figures_of(batch)`: the figures the Spark sink's journal kept for the batch's commit, if
    any (twopc/spark/journal.py)."""
    state = view.state
    recent = sorted(state.batches.values(), key=lambda b: b.last_seq)[-batches:] if batches else []
    pending = state.pending
    handles = [h for b in pending for h in b.intent]
    coord_now, skew = coordinator_now(handles, now_ms)
    described = control.describe_transactions([h.transactional_id for h in handles]) \
        if control is not None and handles else {}
    pending_rows: list[dict[str, Any]] = [{"batch": b.batch, "intent_seq": b.intent_seq,
                     "transactions": [pending_txn(h, coord_now, described.get(h.transactional_id),
                                                  control is not None) for h in b.intent]}
                    for b in pending]
    orphans: list[dict[str, Any]] = []
    if control is not None:
        named = {h.transactional_id for h in handles}
        listed = control.list_transactions(view.owner.prefix, states=[TxnState.ONGOING])
        ids = [t.transactional_id for t in listed
               if in_pool(view.owner.prefix, t.transactional_id) and t.transactional_id not in named]
        found = control.describe_transactions(ids) if ids else {}
        orphans = [orphan_txn(found[t], now_ms) for t in sorted(found)
                   if found[t].state is TxnState.ONGOING]
    stuck = [stuck_batch(view, b) for b in sorted(state.batches.values(), key=lambda b: b.last_seq)
             if b.status is BatchStatus.PARTIAL or b.awaits_repair]
    for row, b in zip(pending_rows, pending, strict=True):
        row["source_offsets"] = None if b.offsets is None else b.offsets.to_obj()
    source = source_offsets(state, control)
    warnings = _warnings(pending_rows, orphans, warn_ratio, control is not None)
    if source is not None:
        warnings += source.pop("warnings")
    attention = [f"batch {p['batch']} is pending (an intent without outcome): run `twopc recover` "
                 "or restart the query" for p in pending_rows]
    attention += [f"batch {s['batch']} was aborted after its intent: its decided records wait in "
                  "the Kafka log (until its retention) for its re-run or `twopc recover --repair "
                  "copy` to copy them forward; the log's purge keeps it and every later batch "
                  "until then (`--resolve` it aborted to give them up)" if s["awaits_repair"] else
                  f"batch {s['batch']} is partly committed: restart the query (a deterministic "
                  "re-run repairs it)" + (", or resolve it: its re-run was refused (DataLossError)"
                                          if s["data_loss"] else "") for s in stuck]
    lease = state.lease
    running = lease is not None and lease.live(now_ms)
    if orphans and running:
        assert lease is not None
        attention.append(f"{len(orphans)} open transaction(s) of prefix {view.owner.prefix!r} "
                         f"that no record names, while job {lease.job} runs (its lease lasts "
                         f"until {when(lease.until_ms)}): they may be its own, not yet recorded; "
                         "`twopc recover` would fence them and fail the job")
    elif orphans:
        attention.append(f"{len(orphans)} open transaction(s) of prefix {view.owner.prefix!r} "
                         "that no record names: `twopc recover` fences them")
    holds = [h for _, h in sorted(state.stranded.items())]
    attention += [f"{h.transactional_id} (batch {', '.join(h.batches)}) is held: a committed "
                  "transaction may still hold partitions open; `twopc recover` releases it"
                  for h in holds]
    held = [{"transactional_id": h.transactional_id, "batches": list(h.batches), "seq": h.seq,
             "reason": h.reason} for h in holds]
    return {
        "checkpoint": redact_url(view.log.url),
        "binding": {"owner_kind": view.owner.kind.value, "owner_id": view.owner.owner_id,
                    "prefix": view.owner.prefix},
        "last_seq": state.last_seq, "low_water_mark": view.low_water_mark,
        "now_ms": now_ms, "clock_skew_ms": skew,
        "broker_checked": control is not None,
        "batches": [{**batch_row(b), "figures": figures_of(b.batch) if figures_of else None}
                    for b in recent],
        "pending": pending_rows, "stuck": stuck, "orphans": orphans, "stranded": held,
        "source_offsets": source,
        "lease": None if lease is None else {
            "job": lease.job, "run": lease.run, "holder": lease.holder,
            "since_ms": lease.since_ms, "until_ms": lease.until_ms, "live": running},
        "warnings": warnings, "attention": attention + warnings,
        "healthy": not attention and not warnings,
    }


def source_offsets(state: LogState, control: ControlClient | None) -> dict[str, Any] | None:
    """The group that gets the source offsets, the end offsets of the last committed batch that
    carried them, the committed batches whose offsets have not moved yet (and the batch that holds
    them back, if one does: protocol/plans.py `plan_offsets`), and (with a broker) what the group
    holds: its committed offset and whether a transaction holds newer ones pending. None if no
    batch the log holds carried offsets."""
    carried = sorted((b for b in state.batches.values() if b.offsets is not None),
                     key=lambda b: b.last_seq)
    if not carried:
        return None
    done = [b for b in carried if b.status is BatchStatus.COMMITTED]
    last = done[-1] if done else None
    group = carried[-1].offsets.group if carried[-1].offsets else ""
    ends: SourceOffsets | None = last.offsets if last is not None else None
    rows: list[dict[str, Any]] = [
        {"topic": t, "partition": p, "batch_end": o, "committed": None, "pending": None}
        for t, p, o in (ends.offsets if ends else ())]
    warnings: list[str] = []
    if control is not None and rows:
        parts = [(r["topic"], r["partition"]) for r in rows]
        held = control.group_offsets(group, parts, require_stable=False).partitions
        stable = control.group_offsets(group, parts, require_stable=True).partitions
        for r in rows:
            tp = (r["topic"], r["partition"])
            r["committed"] = held[tp].offset if tp in held else None
            r["pending"] = tp in stable and stable[tp].error_code != 0
        moved = [r for r in rows if not r["pending"] and r["committed"] != r["batch_end"]]
        if moved and last is not None and last is carried[-1] and not last.offsets_pending:
            warnings.append(
                f"group {group!r} holds other offsets than batch {last.batch}'s end offsets "
                f"(e.g. {moved[0]['topic']}-{moved[0]['partition']}: {moved[0]['committed']}, "
                f"batch end {moved[0]['batch_end']}): something else commits to this group")
    unmoved = [b.batch for b in done if b.offsets_pending]
    plan = plan_offsets(state)
    if unmoved:
        why = (f"batch {plan.blocked_by} is {plan.why}" if plan.blocked_by else
               "the call that committed them was cut short or failed")
        warnings.append(f"the source offsets of batches {', '.join(unmoved)} are not committed to "
                        f"group {group!r} yet: {why}; the next commit or `twopc recover` moves "
                        "them once every batch before is proven visible")
    return {"group": group, "batch": None if last is None else last.batch,
            "carrier": None if ends is None else ends.carrier, "partitions": rows,
            "unmoved": unmoved, "blocked_by": plan.blocked_by, "warnings": warnings}


def _warnings(pending: list[dict[str, Any]], orphans: list[dict[str, Any]], warn_ratio: float,
              asked: bool) -> list[str]:
    out: list[str] = []
    for t in [t for p in pending for t in p["transactions"]] + orphans:
        ratio = t["age_ratio"]
        is_open = t.get("open", True) if asked else True
        if ratio is None or not is_open or ratio < warn_ratio:
            continue
        if ratio >= 1 and not asked:
            out.append(f"{t['transactional_id']}: {t['age_ms']} ms old, past its timeout of "
                       f"{t['timeout_ms']} ms: the coordinator has probably aborted it; recovery "
                       "settles it with the log check")
        else:
            out.append(f"{t['transactional_id']}: open for {t['age_ms']} ms, {ratio:.0%} of its "
                       f"timeout of {t['timeout_ms']} ms: the guard margin is thin; commit or "
                       "recover soon, or raise transaction.timeout.ms")
    return out


# ---- the command ------------------------------------------------------------------------------


def _status(args: argparse.Namespace) -> int:
    control: ControlClient | None = None
    try:
        view = view_of(open_log(args.checkpoint, storage_options(args), read_only=True))
        if args.bootstrap_servers:
            control = ControlClient({**client_settings(args),
                                     "bootstrap.servers": args.bootstrap_servers})
        notes: list[str] = []
        report = build_status(view, control, batches=args.batches, warn_ratio=args.warn_ratio,
                              now_ms=time.time_ns() // 1_000_000,
                              figures_of=journal_figures(args.checkpoint, storage_options(args),
                                                         notes))
        report["journal_errors"] = notes
    except UsageError as exc:
        return fail(str(exc))
    except (CheckpointError, InconsistentLog) as exc:
        return fail(f"cannot read the checkpoint log: {exc}")
    except (ControlError, TwopcError) as exc:
        return fail(f"cannot ask the broker: {exc}")
    finally:
        if control is not None:
            control.close()
    if args.json:
        emit_json(report)
    else:
        print_status(report)
    return 0 if report["healthy"] else 1


def journal_figures(url: str, options: dict[str, Any], notes: list[str] | None = None
                    ) -> Callable[[str], dict[str, Any] | None]:
    """A reader of the journal's commit figures. The journal is a hint for people, never part of
    the protocol: a file of it that cannot be read shows no figures, and why goes to `notes`
    (the report's `journal_errors`), never into the exit code."""
    from twopc.spark.errors import JournalError
    from twopc.spark.journal import Journal

    found_notes = notes if notes is not None else []
    try:
        journal = Journal(url, options)
    except (OSError, ValueError, ImportError) as exc:
        found_notes.append(f"the observe journal beside {redact_url(url)} cannot be opened: {exc}")
        return lambda _batch: None

    def figures(batch: str) -> dict[str, Any] | None:
        try:
            entry = journal.read_batch(batch)
        except (OSError, JournalError) as exc:
            found_notes.append(str(exc))
            return None
        found = entry.get("figures") if entry else None
        return {**found, "at_ms": entry["at_ms"]} if isinstance(found, dict) and entry else None

    return figures


def _txn_line(t: dict[str, Any]) -> str:
    ratio = t["age_ratio"]
    age = f"age {t['age_ms'] / 1000:.1f} s of {t['timeout_ms'] / 1000:.1f} s" + (
        f" ({ratio:.0%})" if ratio is not None else "")
    line = (f"    {t['transactional_id']}  pid {t['producer_id']} epoch {t['epoch']}  "
            f"{t.get('records', '?')} records  {age}")
    broker = t.get("broker")
    if broker is not None:
        line += f"  broker: {broker['state']}"
        if t.get("recovery_would"):
            line += f"; recovery would: {t['recovery_would'].replace('_', ' ')}"
    elif "state" in t:
        line += f"  broker: {t['state']}"
    return line


def print_source_offsets(src: dict[str, Any] | None) -> None:
    if src is None:
        return
    if src["batch"] is None:
        print(f"source offsets: group {src['group']!r}, no committed batch carried them yet")
        return
    # No carrier: a batch without records recorded by a twopc before issue 30, item 6.
    how = f"carried by {src['carrier']}" if src["carrier"] else "committed plainly (no records)"
    print(f"source offsets: group {src['group']!r} at batch {src['batch']} ({how}):")
    for row in src["partitions"]:
        line = f"  {row['topic']}[{row['partition']}]  batch end {row['batch_end']}"
        if row["committed"] is not None or row["pending"] is not None:
            line += f", group {row['committed']}" + (" (newer pending in an open transaction)"
                                                     if row["pending"] else "")
        print(line)


def print_status(r: dict[str, Any]) -> None:
    b = r["binding"]
    print(f"checkpoint {r['checkpoint']}: {b['owner_kind']} {b['owner_id']!r}, prefix "
          f"{b['prefix']!r}; records up to {r['last_seq']} (low-water mark {r['low_water_mark']})")
    print("batches:" if r["batches"] else "batches: none recorded")
    for row in r["batches"]:
        fig = row.get("figures")
        extra = "" if not fig else (
            f"; commit {fig['commit_latency_ms']:.0f} ms" + (
                f", oldest transaction at {fig['oldest_txn_age_ratio']:.0%} of its timeout"
                if fig.get("oldest_txn_age_ratio") is not None else ""))
        print(f"  batch {row['batch']:<8} {row['status']:<10} {row['transactions']} transactions, "
              f"{row['records']} records{extra}")
    for p in r["pending"]:
        print(f"pending batch {p['batch']} (intent record {p['intent_seq']}): the decision is "
              "commit; `twopc recover` or a restarted query rolls it forward")
        for t in p["transactions"]:
            print(_txn_line(t))
    if r["stuck"]:
        print("stuck batches:")
        for s in r["stuck"]:
            print_stuck(s)
    if r["orphans"]:
        print(f"orphans (open transactions of prefix {b['prefix']!r} no record names):")
        for t in r["orphans"]:
            print(_txn_line(t))
    for h in r["stranded"]:
        print(f"held {h['transactional_id']} (batch {', '.join(h['batches'])}): {h['reason']}")
    print_source_offsets(r.get("source_offsets"))
    lease = r.get("lease")
    if lease is not None:
        print(f"job {lease['job']} {'holds' if lease['live'] else 'held'} the family's lease (run "
              f"{lease['run']}, {lease['holder']}, since {when(lease['since_ms'])}, until "
              f"{when(lease['until_ms'])}{'' if lease['live'] else ': expired'})")
    for w in r["warnings"]:
        print(f"WARN {w}")
    for note in r.get("journal_errors", []):
        print(f"note: {note}")
    if not r["broker_checked"]:
        print("(broker not asked: give --bootstrap-servers for transaction states and orphans)")
    print("status: healthy" if r["healthy"] else
          f"status: attention needed ({len(r['attention'])} item(s))")
