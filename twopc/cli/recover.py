"""`twopc recover`: run twopc's recovery by hand, and record an operator's resolution of a stuck batch.

The owner (query or job id) and the transactional id prefix come from the log's own binding.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from checkpoint import CheckpointError, open_log
from checkpoint.redact import redact_url
from twopc.cli._common import (
    UsageError,
    add_checkpoint_args,
    bootstrap_servers,
    client_settings,
    integer,
    is_stuck,
    print_stuck,
    storage_options,
    stuck_batch,
    view_of,
)
from twopc.cli._output import emit_json, fail
from twopc.control import ControlClient, ControlError
from twopc.driver.call import DriverSettings
from twopc.driver.coordinator import Coordinator
from twopc.driver.recovery import Recovery, check_resolution
from twopc.driver.recovery_report import RecoveryReport
from twopc.errors import (
    CopyForwardFailed,
    FenceFailed,
    InconsistentLog,
    LogOwnershipLost,
    ResolutionRefused,
    StrandedCommitAborted,
    StrandedUnreleased,
    TwopcError,
    UndecidedError,
)
from twopc.protocol.copies import RepairPolicy, RepairSettings
from twopc.protocol.log_records import DECISIONS

EPILOG = """Settles every batch whose intent has no outcome (roll forward, or the log check), fences the
prefix's open transactions that no record names, and prints the report. A batch that stays stuck
(undecided, or partly committed with a refused re-run: DataLossError) is shown with what is visible
and what was lost; --resolve records the operator's decision for it, after a confirmation:
  committed  keep what is visible; the re-run writes nothing more (a lost part stays lost)
  aborted    the batch counts as not committed; the re-run writes all of it (a visible part twice)
A batch aborted after its intent (nothing visible, its decided records still in the Kafka log) is
stuck too: its re-run or --repair copy copies the records forward; `--decision aborted` gives them
up instead (the re-run then writes afresh). Until then the log's purge keeps it, and every batch
after it.
With --repair copy, a batch whose commit was decided but whose transactions the broker aborted
(partly committed, or aborted after its intent) is first copied forward from the Kafka log's own
copy of the aborted records, when they are still there and verify.
A committed batch whose records the log proves aborted after their commit (DATA LOSS: a broker
lost their commit markers and the transaction holding them ended as aborted) is reported at every
check, exit 1, until --acknowledge-loss BATCH --note records that the loss was handled.

exit codes: 0 nothing left stuck (or the resolution was recorded); 1 attention needed (undecided,
partly committed, another driver writes the log, resolution declined); 2 bad arguments, no twopc log
at the URL, storage or broker unreachable, resolution refused for the batch's state.

examples:
  twopc recover --checkpoint /data/chk/orders-twopc --bootstrap-servers kafka-1:9092
  twopc recover --checkpoint /data/chk/orders-twopc --bootstrap-servers kafka-1:9092 \\
      --resolve 41 --decision committed --note "ops: accept loss of partition 3, ticket 1234"
  twopc recover --checkpoint /data/chk/orders-twopc --bootstrap-servers kafka-1:9092 --repair copy
  twopc recover --checkpoint /data/chk/orders-twopc --bootstrap-servers kafka-1:9092 \\
      --acknowledge-loss 57 --note "ops: re-sent from the source, ticket 1240"
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "recover", help="settle pending batches by hand; resolve a stuck batch",
        description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_checkpoint_args(p)
    p.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT[,...]",
                   type=bootstrap_servers)
    p.add_argument("--resolve", metavar="BATCH", help="record a decision for this stuck batch")
    p.add_argument("--decision", choices=DECISIONS, help="with --resolve: committed or aborted")
    p.add_argument("--acknowledge-loss", metavar="BATCH",
                   help="record that the proven loss of this committed batch's records was handled")
    p.add_argument("--note", help="with --resolve or --acknowledge-loss: who decided and why "
                   "(kept in the log)")
    p.add_argument("--yes", action="store_true",
                   help="with --resolve or --acknowledge-loss: do not ask for confirmation")
    p.add_argument("--repair", choices=("copy",),
                   help="copy forward: commit the aborted part of every batch whose commit was "
                        "decided from the Kafka log's copy of its records (verified against the "
                        "recorded counts and checksums), with no re-run")
    p.add_argument("--copy-timeout-ms", type=integer(1000, 2**31 - 1, "milliseconds"),
                   default=60000, help="with --repair copy: transaction.timeout.ms of the copies")
    p.add_argument("--settle-wait-ms", type=integer(0, 2**31 - 1, "milliseconds"), default=60000,
                   help="how long the log check waits for a partition to become stable")
    p.add_argument("--allow-unconditional-create", action="store_true",
                   help="accept a storage backend without atomic create-if-absent (risky)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--json", action="store_true", help="machine-readable output (docs/operations.md)")
    p.set_defaults(handler=_recover)


class ProgressBar:
    """A plain-text bar on stderr: redrawn in place on a terminal, one line per change elsewhere."""

    def __init__(self, stream: TextIO, width: int = 30) -> None:
        self.stream = stream
        self.width = width
        self.tty = stream.isatty()
        self.last: tuple[int, int] | None = None

    def __call__(self, done: int, total: int) -> None:
        if (done, total) == self.last:
            return
        self.last = (done, total)
        filled = self.width * done // total if total else self.width
        line = f"recovering: [{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} transactions"
        self.stream.write(("\r" + line) if self.tty else line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self.last is not None:
            self.stream.write("\n")
            self.stream.flush()


def report_obj(report: RecoveryReport) -> dict[str, Any]:
    return {
        "batches": [{
            "batch": b.batch, "outcome": b.outcome.value, "recorded_seq": b.recorded_seq,
            "committed_partitions": b.committed_partitions, "lost_partitions": b.lost_partitions,
            "transactions": [{"transactional_id": h.transactional_id,
                              "task_partition": h.task_partition, "records": h.record_count,
                              "pass1": h.pass1, "outcome": h.outcome, "reason": h.reason}
                             for h in b.handles],
        } for b in report.batches],
        "rolled_forward": list(report.rolled_forward),
        "orphans_fenced": list(report.orphans_fenced),
        "fence_failures": dict(sorted(report.fence_failures.items())),
        "stranded": {
            "released": list(report.stranded.released),
            "unreleased": [{"batch": n.batch, "transactional_id": n.transactional_id,
                            "fate": n.fate.value, "reason": n.reason,
                            "release_failed": _release_failed(report, n.transactional_id),
                            "partitions": [list(tp) for tp in n.partitions]}
                           for n in report.stranded.unreleased],
        },
        "source_offsets": {"moved_to": report.offsets_moved_to,
                           "waiting": report.offsets_waiting or None},
        "summary": report.summary(),
    }


def _release_failed(report: RecoveryReport, transactional_id: str) -> str | None:
    r = report.stranded.releases.get(transactional_id)
    return None if r is None or r.released else f"{r.step}: {r.error}"


def _validate(args: argparse.Namespace) -> None:
    if args.acknowledge_loss is not None:
        if args.resolve is not None or args.decision is not None or args.repair is not None:
            raise UsageError("--acknowledge-loss goes alone (with --note), not with --resolve "
                             "or --repair")
        if args.note is None or not args.note.strip():
            raise UsageError("--acknowledge-loss needs --note saying who handled the loss and how")
        return
    given = [args.decision is not None, args.note is not None]
    if args.resolve is None and any(given):
        raise UsageError("--decision and --note go with --resolve BATCH")
    if args.resolve is not None and not all(given):
        raise UsageError("--resolve needs --decision committed|aborted and --note TEXT")
    if args.resolve is not None and not args.note.strip():
        raise UsageError("--note must say who decided and why")


def _confirm(batch: str, decision: str, awaits_repair: bool) -> bool:
    consequence = ("what is visible stays, the re-run writes nothing more: a lost part stays lost"
                   if decision == "committed" else
                   "its decided records are given up (never copied forward), a re-run writes it "
                   "afresh" if awaits_repair else
                   "the re-run writes the whole batch again: a visible part appears twice")
    print(f"Record decision '{decision}' for batch {batch}? {consequence}. This is permanent. "
          "[y/N] ", end="", file=sys.stderr, flush=True)
    try:
        answer = input()
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def _recover(args: argparse.Namespace) -> int:
    control: ControlClient | None = None
    try:
        _validate(args)
        # A misspelt URL must not become a new, empty log: look before opening for writing.
        view_of(open_log(args.checkpoint, storage_options(args), read_only=True))
        log = open_log(args.checkpoint, storage_options(args),
                       allow_unconditional_create=args.allow_unconditional_create)
        owner = view_of(log).owner
        kafka = {**client_settings(args), "bootstrap.servers": args.bootstrap_servers}
        control = ControlClient(kafka)
        settings = DriverSettings(owner, settle_wait_ms=args.settle_wait_ms, repair=RepairSettings(
            RepairPolicy.COPY, kafka, args.copy_timeout_ms))
        recovery = Recovery(log, control, settings)
        copier = Coordinator(log, control, settings) if args.repair == "copy" else None
        return _run(args, recovery, copier)
    except UsageError as exc:
        return fail(str(exc))
    except ResolutionRefused as exc:
        return fail(f"resolution refused: {exc}")
    except LogOwnershipLost as exc:
        return fail(str(exc), 1)
    except (CheckpointError, InconsistentLog) as exc:
        return fail(f"cannot use the checkpoint log: {exc}")
    except (ControlError, TwopcError) as exc:
        return fail(f"recovery stopped: {exc}")
    finally:
        if control is not None:
            control.close()


def _copy_all(copier: Coordinator, recovery: Recovery) -> tuple[list[dict[str, Any]],
                                                                 list[dict[str, str]]]:
    """Copy forward every batch whose decided transactions were aborted: what was copied (batch,
    ids, records), and what could not be (batch, why)."""
    copied: list[dict[str, Any]] = []
    failed: list[dict[str, str]] = []
    for b in sorted(view_of(recovery.log).state.batches.values(), key=lambda b: b.last_seq):
        if not b.lost:
            continue
        try:
            done = copier.copy_forward(b.batch)
        except CopyForwardFailed as exc:
            failed.append({"batch": b.batch, "reason": "; ".join(exc.reasons)})
            continue
        if done is not None:
            copied.append({"batch": b.batch, "transactions": list(done.committed),
                           "duplicates": list(done.duplicates)})
    return copied, failed


def _run(args: argparse.Namespace, recovery: Recovery, copier: Coordinator | None = None) -> int:
    bar = None if args.no_progress else ProgressBar(sys.stderr)
    undecided: UndecidedError | None = None
    loss: StrandedCommitAborted | None = None
    try:
        report = recovery.recover(on_progress=bar)
    except (UndecidedError, StrandedUnreleased, FenceFailed) as exc:
        # What recovery did before it stopped, or what it left: shown below, exit code 1.
        undecided = exc if isinstance(exc, UndecidedError) else None
        report = exc.report if isinstance(exc.report, RecoveryReport) else RecoveryReport()
    except StrandedCommitAborted as exc:
        loss, report = exc, RecoveryReport()
    finally:
        if bar is not None:
            bar.close()
    if args.acknowledge_loss is not None:
        return _acknowledge(args, recovery, loss)
    copied: list[dict[str, Any]] = []
    not_copied: list[dict[str, str]] = []
    if copier is not None and loss is not None:
        # Every driver call's stranded check raises the proven loss again until it is
        # acknowledged: nothing can be copied before that.
        not_copied = [{"batch": b.batch, "reason": "not tried: a proven data loss is "
                       "unacknowledged (--acknowledge-loss)"}
                      for b in view_of(recovery.log).state.batches.values() if b.lost]
    elif copier is not None:
        copied, not_copied = _copy_all(copier, recovery)
    view = view_of(recovery.log)
    stuck = [stuck_batch(view, b) for b in sorted(view.state.batches.values(),
                                                  key=lambda b: b.last_seq)
             if is_stuck(b)]
    out: dict[str, Any] = {"checkpoint": redact_url(recovery.log.url),
                           "binding": {"owner_kind": recovery.owner.kind.value,
                                       "owner_id": recovery.owner.owner_id,
                                       "prefix": recovery.owner.prefix},
                           "recovery": report_obj(report),
                           "undecided_error": str(undecided) if undecided else None,
                           "data_loss": str(loss) if loss else None,
                           "stuck": stuck, "resolution": None,
                           "copied": copied, "not_copied": not_copied}
    if args.resolve is not None:
        check_resolution(view.state.batch(args.resolve), args.decision)  # before asking
        target = next(s for s in stuck if s["batch"] == args.resolve)
        if not args.json:
            _print(out)
        if not args.yes and not _confirm(args.resolve, args.decision, target["awaits_repair"]):
            print("nothing recorded", file=sys.stderr)
            if args.json:
                emit_json(out)
            return 1
        recovery.resolve(args.resolve, args.decision, args.note)
        out["resolution"] = {"batch": args.resolve, "decision": args.decision, "note": args.note}
        out["stuck"] = [s for s in stuck if s["batch"] != args.resolve]
        if args.json:
            emit_json(out)
        else:
            print(f"recorded: batch {args.resolve} resolved as {args.decision} ({args.note})")
        return 0
    if args.json:
        emit_json(out)
    else:
        _print(out)
    return 1 if (stuck or undecided or loss or report.stranded.unreleased
                 or report.fence_failures or not_copied) else 0


def _acknowledge(args: argparse.Namespace, recovery: Recovery,
                 loss: StrandedCommitAborted | None) -> int:
    batch = args.acknowledge_loss
    if loss is not None:
        print(str(loss), file=sys.stderr)
    if not args.yes:
        print(f"Record that the loss of batch {batch}'s aborted records was handled? The holds on "
              "its ids go and checks stop reporting it. This is permanent. [y/N] ", end="",
              file=sys.stderr, flush=True)
        try:
            answer = input()
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing recorded", file=sys.stderr)
            return 1
    ids = recovery.acknowledge_loss(batch, args.note)
    if args.json:
        emit_json({"checkpoint": recovery.log.url, "acknowledged": {
            "batch": batch, "transactional_ids": list(ids), "note": args.note}})
    else:
        print(f"recorded: the loss of batch {batch} ({', '.join(ids)}) acknowledged ({args.note})")
    return 0


def _print(out: dict[str, Any]) -> None:
    rec = out["recovery"]
    print(f"recovery: {rec['summary']}")
    for b in rec["batches"]:
        for t in b["transactions"]:
            line = f"  batch {b['batch']}: {t['transactional_id']}: {t['outcome']}"
            print(line + (f" ({t['reason']})" if t["reason"] else ""))
    for c in out["copied"]:
        print(f"copied forward: batch {c['batch']} ({', '.join(c['transactions'])})")
    for c in out["not_copied"]:
        print(f"not copied forward: batch {c['batch']}: {c['reason']}")
    if out["undecided_error"]:
        print(f"undecided: {out['undecided_error']}")
    if out["data_loss"]:
        print(out["data_loss"])
    if out["stuck"]:
        print("stuck batches (restart the query to re-run a partly committed batch; resolve with "
              "--resolve BATCH --decision committed|aborted --note TEXT):")
        for s in out["stuck"]:
            print_stuck(s)
