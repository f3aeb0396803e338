"""One torture schedule on the core protocol, with real processes, then the audit.

Tasks pre-commit in subprocesses with the real writer (tests/driver/task.py); the first commit of a
faulted batch runs in a driver subprocess (tests/driver/driver_call.py) that is SIGKILLed or paused at a
named crash point; "the restarted query" then recovers and re-runs in this process with a fresh
Coordinator, as a new Spark driver would. Each batch's outcome is read from what the coordinator
answered (CommitReport status, RecoveryReport outcomes, typed errors), never inferred from the fault.
The checkpoint log lives on `faulty://` (testing/twopc_testing/faulty_fs.py) so storage can fail or slow.

The control client's request faults (twopc/control/faults.py) reach the driver subprocess through
its environment (TWOPC_CONTROL_FAULTS, armed by TWOPC_TEST_HOOKS); every firing is appended to a
fault log, from which the report counts them. This process's own clients are never faulted.
With `Schedule.offsets` every batch commits source offsets (end offsets 10, 20, ... of a
two-partition source topic), and the group's offsets, read with require_stable after each batch's
first attempt and at the end, must never stand past a batch whose records are not all visible.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from twopc_testing.faulty_fs import CONTROL_ENV, clear_control, write_control

from checkpoint import open_log
from tests.driver.support import (
    DriverUnderTest,
    Scenario,
    finish,
    run_driver,
    run_tasks,
    started_driver,
    wait_not_ongoing,
)
from tests.torture.result import ScheduleResult, run_to_verdict
from tests.torture.schedule import OFFSETS_APIS, BatchPlan, Schedule, victim_role
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, TxnState
from twopc.control import faults as cf
from twopc.control.errors import ERROR_CODES
from twopc.driver.stranded import StrandedReport
from twopc.errors import CommitUnverified, DataLossError, GuardFailed, StrandedCommitAborted
from twopc.log.session import Session
from twopc.ops.audit import audit_topic, partition_offsets, wait_until_stable
from twopc.protocol.copies import RepairPolicy, RepairSettings
from twopc.protocol.handle import Handle, ResultKind, WriteResult
from twopc.protocol.log_records import (
    Aborted,
    Committed,
    OffsetsCommitted,
    Partial,
    Prepared,
    Released,
    Stranded,
    from_body,
)
from twopc.protocol.offsets import SourceOffsets, alone_id
from twopc.protocol.state import BatchStatus
from twopc.protocol.verdicts import BatchOutcome, StrandedFate

NORMAL_TIMEOUT_MS = 30000
SHORT_TIMEOUT_MS = 4000  # the pause faults: the broker aborts within seconds
# request_delayed and expire_in_waves: the short-lived transactions must still pass guard 3 after
# a task and a driver process started (seconds each on a loaded machine), then expire.
DELAYED_TIMEOUT_MS = 10000
WAVE_TIMEOUT_MS = 15000
PAUSE_LIMIT_S = 60.0
RELEASE_PAUSE_S = 300.0  # a broker restart, then the wait for the markers' fate
# A driver whose requests are dropped on every attempt gives up after this retry budget, and its
# log check waits this long for a partition to become stable.
FAULTY_CONTROL = {"twopc.control.retry.timeout.ms": "2000"}
FAULTY_SETTLE_MS = 3000
OFFSET_STEP = 10  # batch b's source end offsets: (b + 1) * OFFSET_STEP on each source partition
SOURCE_PARTITIONS = 2
_UNSTABLE = ERROR_CODES["UNSTABLE_OFFSET_COMMIT"]


class ScheduleFailed(AssertionError):
    """The harness saw something the protocol promises cannot happen."""


def run_core_schedule(schedule: Schedule, broker: KafkaUnderTest, workdir: Path,
                      variant: str, copy_forward: bool = False) -> ScheduleResult:
    """Run one schedule. With `copy_forward`, the source cannot replay its rows (a re-run of a
    batch with `rerun_changed` writes other rows, whatever the batch's state) and the driver
    copies decided-but-aborted transactions forward (twopc.repairPolicy=auto): such a batch must
    end with its original rows exactly once, and no DataLossError may occur."""
    result = ScheduleResult("core", schedule.seed, variant,
                            steps=[*schedule.describe(),
                                   *(["copy-forward, non-replayable source"] if copy_forward
                                     else [])])
    began = time.monotonic()
    run = _CoreRun(schedule, broker, workdir, result, copy_forward)

    def body() -> None:
        for plan in schedule.batches:
            run.batch(plan)
        run.last_restart()
        run.audit()

    return run_to_verdict(result, began, body, run.close)


class _CoreRun:
    def __init__(self, schedule: Schedule, broker: KafkaUnderTest, workdir: Path,
                 result: ScheduleResult, copy_forward: bool = False) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.copy_forward = copy_forward
        self.schedule = schedule
        self.broker = broker
        self.result = result
        self.faults_file = str(workdir / "faults.json")
        self.wake_file = str(workdir / "twopc-log.wake")
        clear_control(self.faults_file)
        # This process's coordinators and every driver subprocess read the same control file.
        os.environ[CONTROL_ENV] = self.faults_file
        # The control client's faults: driver subprocesses only (this process never reads them).
        self.requests_file = str(workdir / "control-faults.json")
        self.fired_file = str(workdir / "control-fired.jsonl")
        self.env = {CONTROL_ENV: self.faults_file, cf.CONTROL_ENV: self.requests_file}
        topics = (broker.create_topic(2), broker.create_topic(2))
        self.scn = Scenario(broker, topics, f"faulty://{workdir.resolve()}/twopc-log",
                            partitions=schedule.partitions, rows=schedule.rows,
                            timeout_ms=NORMAL_TIMEOUT_MS)
        self.control = ControlClient(broker.config())
        self.source = broker.create_topic(SOURCE_PARTITIONS) if schedule.offsets else None
        self.group = f"g-{self.scn.prefix}"
        self.lost_ids: set[str] = set()  # records twopc proved lost (StrandedCommitAborted)
        self.forgiven: set[int] = set()  # batches whose loss an operator accepted
        self.seen_seq = 0  # log records scanned so far (scan_log)
        self.with_offsets: dict[str, bool] = {}  # batch -> its latest intent names source offsets
        self._previous: object = None  # the last record scanned
        self._released: set[str] = set()  # ids a Released record named (scan_log)

    def close(self) -> None:
        clear_control(self.faults_file)
        self.clear_requests()
        os.environ.pop(CONTROL_ENV, None)
        self.control.close()

    # ---- helpers ------------------------------------------------------------------------------

    def note(self, text: str) -> None:
        self.result.steps.append("  " + text)

    def coordinator(self) -> DriverUnderTest:
        if self.copy_forward:
            return self.scn.driver(self.control, repair=RepairSettings(
                RepairPolicy.AUTO, self.broker.config(), NORMAL_TIMEOUT_MS))
        return self.scn.driver(self.control)

    def write(self, batch: str, tag: str = "", timeout_ms: int = NORMAL_TIMEOUT_MS,
              slot_of: dict[int, int] | None = None) -> list[WriteResult]:
        txns = [self.scn.txn(batch, p, attempt=(slot_of or {}).get(p, 0), tag=tag)
                for p in range(self.scn.partitions)]
        written = run_tasks(self.broker.bootstrap_servers, batch, txns, timeout_ms)
        assert written is not None
        return written

    def call(self, action: str, batch: str, results: Sequence[WriteResult] = (),
             **extra: Any) -> dict[str, Any]:
        offsets = self.offsets(batch)
        if action == "commit" and offsets is not None:
            extra.setdefault("offsets", offsets.to_obj())
        return {"log": self.scn.log_url, "bootstrap": self.broker.bootstrap_servers,
                "owner_id": self.scn.owner_id, "prefix": self.scn.prefix, "action": action,
                "batch": batch, "results": [r.to_obj() for r in results],
                "repair_policy": "auto" if self.copy_forward else "rerun", **extra}

    def offsets(self, batch: str) -> SourceOffsets | None:
        """Batch `batch`'s source end offsets, on schedules with source offsets."""
        if self.source is None:
            return None
        end = (int(batch) + 1) * OFFSET_STEP
        return SourceOffsets(self.group, tuple((self.source, p, end)
                                               for p in range(SOURCE_PARTITIONS)))

    def commit(self, coord: DriverUnderTest, batch: str,
               results: Sequence[WriteResult]) -> Any:
        return coord.commit(batch, results, self.offsets(batch))

    # ---- the control client's request faults ----------------------------------------------

    def arm(self, *faults: cf.Fault) -> int:
        """Switch request faults on for the driver subprocesses started from now on; returns the
        firings so far (see `fired_since`)."""
        cf.write_control(self.requests_file, cf.FaultPlan(tuple(faults), log=self.fired_file))
        return len(cf.read_fired(self.fired_file))

    def clear_requests(self) -> None:
        if os.path.exists(self.requests_file):
            os.unlink(self.requests_file)

    def fired_since(self, before: int) -> list[cf.Fired]:
        fired = cf.read_fired(self.fired_file)[before:]
        for f in fired:
            self.result.fired[f"{f.api} {f.action}"] += 1
        if fired:
            self.note("fired: " + ", ".join(f"{f.api} {f.action} {f.transactional_id or ''}"
                                            for f in fired))
        return fired

    def drive(self, call: dict[str, Any], crash_at: str | None = None) -> dict[str, Any]:
        try:
            return run_driver(call, crash_at, env=self.env)
        except AssertionError as exc:  # died with an untyped error (Spark would call abort)
            return {"error": "crashed", "message": str(exc)[-500:], "rc": 1}

    def paused(self, call: dict[str, Any], point: str, limit_s: float = PAUSE_LIMIT_S) -> Any:
        if os.path.exists(self.wake_file):
            os.unlink(self.wake_file)
        env = {**self.env, "TWOPC_PAUSE_AT": point if "." in point else f"coordinator.{point}",
               "TWOPC_PAUSE_UNTIL": self.wake_file,
               "TWOPC_PAUSE_SECONDS": str(limit_s)}
        return started_driver(call, env)

    def wake(self) -> None:
        with open(self.wake_file, "w"):
            pass

    # ---- one batch ----------------------------------------------------------------------------

    def batch(self, plan: BatchPlan) -> None:
        self.result.steps.append(plan.describe())
        kind = plan.fault
        if kind in ("broker_kill", "storage_slow"):
            self.result.faults[kind] += 1  # the others are counted when they really happen
        name = kind or "plain"
        if plan.release:
            name = "stranded_release"
        try:
            first = getattr(self, f"_first_{name}")(plan)
        except StrandedCommitAborted as exc:  # an earlier batch's stranded records, aborted
            self.acknowledge(exc)
            first = {"error": type(exc).__name__, "message": str(exc)[:500]}
        except (GuardFailed, CommitUnverified) as exc:
            # Typed answers a restarted query handles: the guard fenced the batch (a broker kill
            # took too long, say), or the commit could not check its markers.
            first = {"error": type(exc).__name__, "message": str(exc)[:500]}
        finally:
            self.clear_requests()
        self.note(f"first attempt: {first}")
        if "release failed at" in str(first.get("message", "")):
            self.result.reached["release_cut_short"] += 1
        self.check_group(plan.batch, "after the first attempt")
        if first.get("ok") and first["ok"].get("status") in ("committed", "repaired", "empty"):
            self.result.outcomes["committed"] += 1
            if first["ok"].get("orphans"):
                self.result.outcomes["fenced"] += 1
            self.scn.expect(plan.batch)
            self.scan_log()
            return
        if first.get("restarted"):
            self.scan_log()
            return  # the fault's own second driver already took the batch to its end
        self.restart(plan)
        self.scan_log()

    def restart(self, plan: BatchPlan) -> None:
        """What a restarted query does: recover, then skip (committed) or write and commit."""
        batch, coord = plan.batch, self.coordinator()
        report = self.recover(coord)
        rolled = set(report.rolled_forward)
        for b in report.batches:
            self.note(f"recovery: batch {b.batch} {b.outcome.value} "
                      f"{[(h.transactional_id, h.pass1, h.outcome) for h in b.handles]}")
            if b.outcome is BatchOutcome.COMMITTED and b.batch == batch:
                named = {h.transactional_id for h in b.handles}
                self.result.outcomes["rolled_forward" if named & rolled
                                     else "recognised_committed"] += 1
        if report.orphans_fenced:
            self.note(f"recovery fenced orphans {list(report.orphans_fenced)}")
        self.finish_batch(plan, coord, recovered=any(b.batch == batch for b in report.batches))

    def finish_batch(self, plan: BatchPlan, coord: DriverUnderTest, recovered: bool) -> None:
        batch = plan.batch
        if coord.is_committed(batch):
            skipped = [WriteResult(ResultKind.SKIPPED, batch, p, 0)
                       for p in range(self.scn.partitions)]
            status = self.commit(coord, batch, skipped).status
            if status != "already_committed":
                raise ScheduleFailed(f"batch {batch}: committed, yet its re-run says {status}")
            if not recovered:
                self.result.outcomes["committed"] += 1  # the first driver finished before dying
            self.scn.expect(batch)
            return
        state = Session(open_log(self.scn.log_url)).state.batch(batch)
        changed = plan.rerun_changed and (self.copy_forward or state.status is BatchStatus.PARTIAL)
        tag = "-changed" if changed else ""
        rerun = self.write(batch, tag=tag)
        try:
            status = self.commit(coord, batch, rerun).status
        except StrandedCommitAborted:
            raise  # recover() above would have raised it first
        except DataLossError as exc:
            if self.copy_forward:
                raise ScheduleFailed(f"batch {batch}: DataLossError with copy-forward: {exc}") \
                    from exc
            self.lost_and_resolved(plan, coord, exc)
            return
        self.note(f"re-run: {status}")
        if status == "copied":
            # The originals, copied forward from the log; the re-run's rows were fenced.
            if not state.lost:
                raise ScheduleFailed(f"batch {batch}: copied, but the log named nothing lost")
            self.result.outcomes["copied_forward"] += 1
            self.scn.expect(batch)
            return
        if status == "committed" and tag:
            # Nothing of the batch was decided before (the guard aborted it): the re-run's rows.
            self.result.outcomes["rewritten"] += 1
            self.scn.expect(batch, tag)
            return
        if status == "repaired":
            self.result.outcomes["repaired"] += 1
        elif status == "committed":
            self.result.outcomes["rewritten"] += 1
        else:
            raise ScheduleFailed(f"batch {batch}: the re-run of an uncommitted batch says {status}")
        self.scn.expect(batch)

    def lost_and_resolved(self, plan: BatchPlan, coord: DriverUnderTest, exc: DataLossError) -> None:
        batch = plan.batch
        self.result.outcomes["data_loss_raised"] += 1
        self.note(f"DataLossError: {exc}")
        if not plan.rerun_changed:
            raise ScheduleFailed(f"batch {batch}: an identical re-run raised DataLossError: {exc}")
        # The log names what is visible; the rest of the batch is lost, knowingly.
        visible = set(Session(open_log(self.scn.log_url)).state.batch(batch).committed)
        coord.resolve(batch, "committed", f"torture seed {self.result.seed}: accept the loss")
        if not coord.is_committed(batch):
            raise ScheduleFailed(f"batch {batch}: the operator's resolution did not commit it")
        self.result.outcomes["resolved_by_operator"] += 1
        self.forgiven.add(int(batch))
        for p in range(self.scn.partitions):
            if p in visible:
                self.scn.expected.setdefault(self.scn.topic_of(p), set()).update(
                    self.scn.ids(batch, p))
            else:
                self.result.reported_lost += len(self.scn.ids(batch, p))
        self.note(f"operator resolved: visible partitions {sorted(visible)}")

    # ---- the first attempt of each fault kind -------------------------------------------------

    def _first_plain(self, plan: BatchPlan) -> dict[str, Any]:
        report = self.commit(self.coordinator(), plan.batch, self.write(plan.batch))
        return {"ok": {"status": report.status, "orphans": list(report.orphans)}}

    def _first_driver_kill(self, plan: BatchPlan) -> dict[str, Any]:
        results = self.write(plan.batch)
        out = self.drive(self.call("commit", plan.batch, results),
                         crash_at=f"coordinator.{plan.point}")
        if out.get("killed"):
            self.result.faults["driver_kill"] += 1
        if plan.recovery_point:
            again = self.drive(self.call("recover", plan.batch),
                               crash_at=f"recovery.{plan.recovery_point}")
            self.note(f"recovery with recovery.{plan.recovery_point}: {again}")
            if again.get("killed"):
                self.result.faults["driver_kill"] += 1
            elif again.get("rc") != 0:
                raise ScheduleFailed(f"recovery failed: {again}")
        return out

    def _first_task_failure(self, plan: BatchPlan) -> dict[str, Any]:
        p = plan.task_partition
        dead = [self.scn.txn(plan.batch, p, attempt=0, tag="-dead")]
        died = run_tasks(self.broker.bootstrap_servers, plan.batch, dead, NORMAL_TIMEOUT_MS,
                         crash_at=f"writer.{plan.point}")
        if died is None:
            self.result.faults["task_failure"] += 1
        else:
            raise ScheduleFailed(f"the task did not die at writer.{plan.point}")
        # Spark retries the task: attempt 1 takes the next slot; attempt 0's transaction is an orphan.
        results = self.write(plan.batch, slot_of={p: 1})
        report = self.commit(self.coordinator(), plan.batch, results)
        return {"ok": {"status": report.status, "orphans": list(report.orphans)}}

    def victim(self, plan: BatchPlan, results: Sequence[WriteResult]) -> int | None:
        """The broker a broker fault kills: all of a single broker; on a replicated cluster the
        leader of a partition the batch wrote to, or its ids' coordinator (victim_role)."""
        if not self.broker.replicated:
            return None
        role = victim_role(self.result.seed, sum(self.result.victims.values()))
        handles = [r.handle for r in results if r.handle is not None]
        node = self.broker.victim(self.control, role, [h.transactional_id for h in handles],
                                  [(s.topic, s.partition) for h in handles for s in h.spans])
        self.result.victims[role] += 1
        self.note(f"broker {node} is the {role}: it is the one killed")
        return node

    def _first_broker_kill(self, plan: BatchPlan) -> dict[str, Any]:
        results = self.write(plan.batch)
        node = self.victim(plan, results)
        self.broker.kill(node)
        self.broker.restart(node)
        report = self.commit(self.coordinator(), plan.batch, results)
        return {"ok": {"status": report.status, "orphans": list(report.orphans)}}

    def _first_broker_kill_mid_commit(self, plan: BatchPlan) -> dict[str, Any]:
        results = self.write(plan.batch)
        with self.paused(self.call("commit", plan.batch, results), "after_endtxn_1") as proc:
            if not _wait_paused(proc):
                return _finished(proc)
            node = self.victim(plan, results)
            self.result.faults["broker_kill_mid_commit"] += 1
            return self.kill_while_paused(proc, node, plan.wake_before_restart)

    def kill_while_paused(self, proc: Any, node: int | None, wake_first: bool) -> dict[str, Any]:
        """SIGKILL broker `node` while the driver is paused; wake the driver before the restart
        (it goes on while the broker is down) or after it; the driver's answer."""
        self.broker.kill(node)
        if wake_first:
            self.wake()
            time.sleep(0.5)
            self.broker.restart(node)
        else:
            self.broker.restart(node)
            self.wake()
        return _finished(proc)

    def _first_storage_failure(self, plan: BatchPlan) -> dict[str, Any]:
        results = self.write(plan.batch)
        write_control(self.faults_file, fail=(plan.storage_op,), match="records/",
                      after=plan.storage_after)
        try:
            out = self.drive(self.call("commit", plan.batch, results))
        finally:
            clear_control(self.faults_file)
        if "StorageUnavailable" in str(out.get("message", "")) or out.get(
                "error") == "StorageUnavailable":
            self.result.faults["storage_failure"] += 1
        return out

    def _first_storage_slow(self, plan: BatchPlan) -> dict[str, Any]:
        results = self.write(plan.batch)
        write_control(self.faults_file, delay_s=0.2)
        try:
            report = self.commit(self.coordinator(), plan.batch, results)
        finally:
            clear_control(self.faults_file)
        return {"ok": {"status": report.status, "orphans": list(report.orphans)}}

    def _first_pause_past_timeout(self, plan: BatchPlan) -> dict[str, Any]:
        assert plan.point is not None
        results = self.write(plan.batch, timeout_ms=SHORT_TIMEOUT_MS)
        call = self.call("commit", plan.batch, results, margin_ms=200)
        with self.paused(call, plan.point) as proc:
            if not _wait_paused(proc):
                return _finished(proc)
            self.result.faults["pause_past_timeout"] += 1
            wait_not_ongoing(self.control, [r.handle for r in results if r.handle is not None])
            self.wake()
            return _finished(proc)

    def _first_two_drivers(self, plan: BatchPlan) -> dict[str, Any]:
        assert plan.point is not None
        results = self.write(plan.batch)
        with self.paused(self.call("commit", plan.batch, results), plan.point) as proc:
            if not _wait_paused(proc):
                return _finished(proc)
            self.result.faults["two_drivers"] += 1
            self.restart(plan)  # the second driver, on the same checkpoint
            self.wake()
            first = _finished(proc)
        self.note(f"first driver after waking: {first}")
        if first.get("error") != "LogOwnershipLost":
            raise ScheduleFailed(f"the paused first driver was not stopped by the log: {first}")
        self.result.outcomes["fenced"] += 1
        return {"restarted": True, **first}

    # ---- the new faults of issue 30, item 7 -----------------------------------------------------

    def handle_of(self, results: Sequence[WriteResult], p: int) -> Handle:
        handle = next(r.handle for r in results if r.task_partition == p)
        assert handle is not None
        return handle

    def _request_fault(self, plan: BatchPlan, action: cf.Action) -> dict[str, Any]:
        """request_lost / answer_lost of the batch's own commit: an EndTxn of one partition's
        transaction, or (source offsets) a request of the offsets' own transaction."""
        assert plan.fault is not None and plan.api is not None
        results = self.write(plan.batch)
        api = plan.api
        if api in OFFSETS_APIS:
            tid = alone_id(self.scn.prefix)
            api = api.removeprefix("OFFSETS_")
        else:
            tid = self.handle_of(results, plan.task_partition).transactional_id
        before = self.arm(cf.Fault(api, action, transactional_id=tid,
                                   count=None if plan.every_retry else 1))
        extra: dict[str, Any] = {}
        if plan.every_retry:
            extra = {"control": FAULTY_CONTROL, "settle_wait_ms": FAULTY_SETTLE_MS}
        out = self.drive(self.call("commit", plan.batch, results, **extra))
        self.clear_requests()
        if self.fired_since(before):
            self.result.faults[plan.fault] += 1
        return out

    def _first_request_lost(self, plan: BatchPlan) -> dict[str, Any]:
        return self._request_fault(plan, cf.Action.DROP_REQUEST)

    def _first_answer_lost(self, plan: BatchPlan) -> dict[str, Any]:
        return self._request_fault(plan, cf.Action.DROP_ANSWER)

    def _first_request_delayed(self, plan: BatchPlan) -> dict[str, Any]:
        """One partition's transaction has a short timeout and its EndTxn is held back past it:
        the coordinator aborts it first (broker churn, a slow network)."""
        p = plan.task_partition
        others = [self.scn.txn(plan.batch, q) for q in range(self.scn.partitions) if q != p]
        results = run_tasks(self.broker.bootstrap_servers, plan.batch, others, NORMAL_TIMEOUT_MS)
        late = run_tasks(self.broker.bootstrap_servers, plan.batch, [self.scn.txn(plan.batch, p)],
                         DELAYED_TIMEOUT_MS)
        assert results is not None and late is not None
        results = sorted(results + late, key=lambda r: r.task_partition)
        tid = self.handle_of(results, p).transactional_id
        before = self.arm(cf.Fault("END_TXN", cf.Action.DELAY, transactional_id=tid, count=1,
                                   delay_s=DELAYED_TIMEOUT_MS / 1000 + 3))
        out = self.drive(self.call("commit", plan.batch, results, margin_ms=200))
        self.clear_requests()
        if self.fired_since(before):
            self.result.faults["request_delayed"] += 1
        return out

    def _first_expire_in_waves(self, plan: BatchPlan) -> dict[str, Any]:
        """Tasks start in waves: the first `early` partitions' transactions were written first,
        with a short timeout; they expire before the commit, while the driver is paused in it,
        or while it is down, and the later wave is still alive."""
        early_txns = [self.scn.txn(plan.batch, p) for p in range(plan.early)]
        early = run_tasks(self.broker.bootstrap_servers, plan.batch, early_txns, WAVE_TIMEOUT_MS)
        assert early is not None
        early_handles = [r.handle for r in early if r.handle is not None]
        if plan.point == "none":
            wait_not_ongoing(self.control, early_handles, WAVE_TIMEOUT_MS / 1000 + 30)
            self.result.faults["expire_in_waves"] += 1
        late_txns = [self.scn.txn(plan.batch, p) for p in range(plan.early, self.scn.partitions)]
        late = run_tasks(self.broker.bootstrap_servers, plan.batch, late_txns, NORMAL_TIMEOUT_MS)
        assert late is not None
        results = sorted(early + late, key=lambda r: r.task_partition)
        call = self.call("commit", plan.batch, results, margin_ms=200)
        if plan.point == "none":
            return self.drive(call)
        if plan.point == "kill":
            out = self.drive(call, crash_at="coordinator.after_endtxn_1")
            if out.get("killed"):
                wait_not_ongoing(self.control, early_handles, WAVE_TIMEOUT_MS / 1000 + 30)
                self.result.faults["expire_in_waves"] += 1
            return out
        with self.paused(call, str(plan.point)) as proc:
            if not _wait_paused(proc):
                return _finished(proc)  # guard 3 refused: the early wave had too little left
            wait_not_ongoing(self.control, early_handles, WAVE_TIMEOUT_MS / 1000 + 30)
            self.result.faults["expire_in_waves"] += 1
            self.wake()
            return _finished(proc)

    def operator_fences(self, ids: Sequence[str]) -> dict[str, Any]:
        """`twopc txn fence` from another process, as an operator would run it."""
        done = subprocess.run(
            [sys.executable, "-m", "twopc.cli", "txn", "fence", "--bootstrap-servers",
             self.broker.bootstrap_servers, "--json", *ids],
            capture_output=True, text=True, timeout=120,
            env={k: v for k, v in os.environ.items() if not k.startswith("TWOPC_")})
        self.note(f"operator: twopc txn fence {' '.join(ids)} -> rc {done.returncode} "
                  f"{done.stdout.strip()[:300]}")
        return {"rc": done.returncode, "out": done.stdout}

    def _first_outside_abort(self, plan: BatchPlan) -> dict[str, Any]:
        results = self.write(plan.batch)
        tid = self.handle_of(results, plan.task_partition).transactional_id
        if plan.point == "before_commit":
            if self.operator_fences([tid])["rc"] == 0:
                self.result.faults["outside_abort"] += 1
            return self.drive(self.call("commit", plan.batch, results))
        with self.paused(self.call("commit", plan.batch, results), str(plan.point)) as proc:
            if not _wait_paused(proc):
                return _finished(proc)
            if self.operator_fences([tid])["rc"] == 0:
                self.result.faults["outside_abort"] += 1
            self.wake()
            return _finished(proc)

    def _first_leader_down_during_check(self, plan: BatchPlan) -> dict[str, Any]:
        """The leader of the batch's first partition is SIGKILLed while the driver is paused in
        its marker check (after the batch's `committed` record)."""
        results = self.write(plan.batch)
        with self.paused(self.call("commit", plan.batch, results), str(plan.point)) as proc:
            if not _wait_paused(proc):
                return _finished(proc)
            span = self.handle_of(results, 0).spans[0]
            node = self.broker.victim(self.control, "leader", (), [(span.topic, span.partition)])
            self.note(f"broker {node} leads {span.topic}[{span.partition}]: it is killed")
            self.result.faults["leader_down_during_check"] += 1
            return self.kill_while_paused(proc, node, plan.wake_before_restart)

    def _first_stranded_release(self, plan: BatchPlan) -> dict[str, Any]:
        """The batch's commit markers are held back (min.insync.replicas above the replicas) while
        its EndTxns are answered; the broker is SIGKILLed and restarted, which often drops them
        for good (tests/broker/test_restart_mid_commit.py). The driver then wakes, finds its
        batch stranded and releases it, and the release meets the fault: its request or answer
        lost, or (outside_abort) its EndTxn lost and the held id fenced by an operator.

        The kill comes the moment the driver pauses after its EndTxns, without a look first: the
        markers land within about half a second of the answers (measured on Kafka 4.3.1, TV0:
        PrepareCommit right after the answer, CompleteCommit 0.5 s later, whatever
        min.insync.replicas says: 4.3.1 caps it at the replica count, Partition.effectiveMinIsr),
        and a look before the kill let them land in nearly every schedule (0 of 10 outside aborts
        of a release reached on kafka4-tv0, 1 of 7 on kafka4-tv2). Whether they were dropped is
        read after the restart."""
        assert plan.fault is not None and plan.api is not None
        results = self.write(plan.batch)
        ids = [r.handle.transactional_id for r in results if r.handle is not None]
        self.set_min_isr(2)
        try:
            call = self.call("commit", plan.batch, results, control=FAULTY_CONTROL)
            with self.paused(call, "after_all_endtxn", RELEASE_PAUSE_S) as proc:
                if not _wait_paused(proc):
                    return _finished(proc)
                self.broker.kill()
                self.broker.restart()
                self.set_min_isr(1)
                stranded = self.wait_stranded(ids)
                states = self.control.describe_transactions(ids)
                self.note(f"coordinator after the restart: "
                          f"{sorted((t, d.state.value) for t, d in states.items())}")
                self.note("markers " + ("dropped: the batch is stranded" if stranded
                                        else "delivered (before the kill or after the restart)"))
                action = cf.Action.DROP_ANSWER if plan.fault == "answer_lost" \
                    else cf.Action.DROP_REQUEST
                before = self.arm(cf.Fault(plan.api, action,
                                           count=None if plan.every_retry else 1))
                self.wake()
                out = _finished(proc)
        finally:
            self.set_min_isr(1)
            self.clear_requests()
        if not self.fired_since(before):
            return out
        if plan.fault != "outside_abort":
            self.result.faults[plan.fault] += 1
            return out
        # The release was cut short: its transaction is open on the held ids. An operator fences
        # it from another process (`twopc txn fence`), aborting the stranded records with it.
        open_ids = [t for t, d in self.control.describe_transactions(ids).items()
                    if d.state is TxnState.ONGOING]
        if open_ids and self.operator_fences(open_ids)["rc"] == 0:
            self.result.faults["outside_abort"] += 1
            self.result.reached["stranded_fenced"] += 1
        return out

    def set_min_isr(self, value: int) -> None:
        admin = AdminClient(self.broker.config())
        entry = ConfigEntry("min.insync.replicas", str(value),
                            incremental_operation=AlterConfigOpType.SET)
        resources = [ConfigResource(ConfigResource.Type.TOPIC, t, incremental_configs=[entry])
                     for t in self.scn.topics]
        for future in admin.incremental_alter_configs(resources).values():
            future.result(60)
        # The broker applies a topic's config as it replays the metadata log: wait until it
        # shows the new value, so that the commit's markers meet it.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            described = admin.describe_configs(
                [ConfigResource(ConfigResource.Type.TOPIC, t) for t in self.scn.topics])
            if all(f.result(30)["min.insync.replicas"].value == str(value)
                   for f in described.values()):
                return
            time.sleep(0.2)

    def wait_stranded(self, ids: Sequence[str], limit_s: float = 60) -> bool:
        """After the restart: True once the coordinator completed the commit while a partition
        stays held open (its markers dropped), False once every partition is stable."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            offsets = [o for t in self.scn.topics
                       for o in partition_offsets(self.broker.config(), t).values()]
            if all(lso == hw for lso, hw in offsets):
                return False
            states = self.control.describe_transactions(list(ids))
            if all(d.state is not TxnState.PREPARE_COMMIT for d in states.values()):
                return True
            time.sleep(0.2)
        return False

    # ---- what twopc reported ---------------------------------------------------------------

    def recover(self, coord: DriverUnderTest) -> Any:
        """A restarted query's recovery; a proven loss of committed records (StrandedCommitAborted)
        is acknowledged by the operator, and the query recovers again."""
        began = time.monotonic()
        try:
            report = coord.recover()
        except StrandedCommitAborted as exc:
            self.result.recovery_s.append(time.monotonic() - began)
            self.acknowledge(exc)
            began = time.monotonic()
            report = coord.recover()
        self.result.recovery_s.append(time.monotonic() - began)
        self.count_finished(report.stranded)
        return report

    def count_finished(self, report: StrandedReport) -> None:
        for n in report.notes:
            r = report.releases.get(n.transactional_id)
            if n.fate is StrandedFate.FINISH and r is not None and r.released:
                self.result.reached["release_finished"] += 1
                self.note(f"the half-done release of {n.transactional_id} (batch {n.batch}) "
                          "was finished")

    def acknowledge(self, exc: StrandedCommitAborted) -> None:
        """twopc proved committed records aborted: they are reported lost (not expected), and the
        operator records with `twopc recover --acknowledge-loss` that the loss was handled."""
        self.result.reached["stranded_commit_aborted"] += 1
        self.note(f"StrandedCommitAborted: {str(exc)[:400]}")
        for batch in sorted({b for b, _, _ in exc.lost}):
            for b, h, _ in exc.lost:
                if b == batch:
                    ids = self.scn.ids(b, h.task_partition)
                    self.lost_ids.update(ids)
                    self.result.reported_lost += h.record_count
                    self.result.aborted_from_outside += h.record_count
            for _ in range(5):  # refused while a leader is away: the operator asks again
                done = subprocess.run(
                    [sys.executable, "-m", "twopc.cli", "recover", "--checkpoint",
                     self.scn.log_url, "--bootstrap-servers", self.broker.bootstrap_servers,
                     "--acknowledge-loss", batch, "--note",
                     f"torture seed {self.result.seed}: loss handled", "--yes"],
                    capture_output=True, text=True, timeout=180,
                    env={**{k: v for k, v in os.environ.items() if not k.startswith("TWOPC_")},
                         CONTROL_ENV: self.faults_file})
                if done.returncode == 0 or "cannot answer yet" not in done.stderr:
                    break
                self.note(f"operator: acknowledgement of batch {batch} refused for now: "
                          f"{done.stderr.strip()[-300:]}")
                time.sleep(3)
            self.note(f"operator: twopc recover --acknowledge-loss {batch} -> rc "
                      f"{done.returncode} {done.stdout.strip()[-300:]}")
            if done.returncode != 0:
                raise ScheduleFailed(f"twopc recover --acknowledge-loss {batch} failed: "
                                     f"{done.stdout[-800:]} {done.stderr[-800:]}")
            self.result.outcomes["loss_acknowledged"] += 1
            self.forgiven.add(int(batch))

    def scan_log(self) -> None:
        """Items 1 and 2 as twopc recorded them, from the records appended since the last scan:
        first releases of a stranded commit; batches with source offsets ended partial or aborted
        after their intent (their offsets held back); offsets moved by a later call than the
        commit (`_late`)."""
        for rec in open_log(self.scn.log_url).records():
            if rec.seq <= self.seen_seq:
                continue
            record = from_body(rec.body)
            self.seen_seq = rec.seq
            if isinstance(record, Prepared):
                self.with_offsets[record.batch] = record.offsets is not None
            elif isinstance(record, Released):
                self.result.reached["stranded_commit"] += len(set(record.ids) - self._released)
                self._released.update(record.ids)
            elif isinstance(record, Partial | Aborted) and record.intent_seq is not None and \
                    self.with_offsets.get(record.batch):
                self.result.reached["offsets_held_back"] += 1
            elif isinstance(record, OffsetsCommitted) and self._late(record):
                self.result.reached["offsets_moved_late"] += 1
            self._previous = record

    def _late(self, moved: OffsetsCommitted) -> bool:
        """Moved by a later call than the commit: the commit path appends `offsets_committed`
        right after its `committed` record (or the markers check's own records); recovery or a
        re-run after a `rollforward` or `orphans` record naming the offsets' id anew, or after
        other batches' records."""
        prev = self._previous
        same_call = (isinstance(prev, Committed) and prev.batch == moved.batch) or \
            isinstance(prev, Released | Stranded)
        return not same_call

    def check_group(self, batch: str, when: str, final: bool = False) -> None:
        """With source offsets: the group's committed offsets (OffsetFetch, require_stable) never
        stand past a batch whose records are not all visible at read_committed (issue 30, item
        2): at end offsets of batch k, every batch up to k is visible, or its loss was reported
        and handled by an operator. Offsets still pending in an open transaction are not
        checked now (the next check sees them decided)."""
        if self.source is None:
            return
        answer = self.control.group_offsets(
            self.group, [(self.source, p) for p in range(SOURCE_PARTITIONS)], require_stable=True)
        codes = {tp: p.error_code for tp, p in answer.partitions.items()}
        if answer.error_code == _UNSTABLE or _UNSTABLE in codes.values():
            self.note(f"group {when}: offsets pending in an open transaction, not checked now")
            return
        if answer.error_code or any(codes.values()):
            raise ScheduleFailed(f"OffsetFetch of {self.group}: {answer.error_code} {codes}")
        ends = {p.offset for p in answer.partitions.values()}
        self.result.reached["group_checked"] += 1
        if ends in (set(), {-1}):
            self.note(f"group {when}: no offsets yet")
            return
        if len(ends) != 1 or next(iter(ends)) % OFFSET_STEP:
            raise ScheduleFailed(f"group {self.group} {when}: offsets {answer.partitions} are no "
                                 "batch's end offsets")
        at = next(iter(ends)) // OFFSET_STEP - 1  # the batch whose end offsets the group holds
        if at > int(batch):
            raise ScheduleFailed(f"group {when}: at batch {at}'s end, past batch {batch}")
        needed = [b for b in range(at + 1) if b not in self.forgiven]
        if not (final or any(str(b) == batch for b in needed)):
            self.note(f"group {when}: at batch {at}'s end offsets (earlier batches: the audit "
                      "reads them)")
            return
        # An open transaction (a stranded commit, an orphan not yet fenced) hides what follows it
        # without deciding it: read what is visible once nothing is open.
        if not all(wait_until_stable(self.broker.config(), t, 10) for t in self.scn.topics):
            self.note(f"group {when}: at batch {at}'s end offsets; a transaction holds the "
                      "partitions open, not checked now")
            return
        missing: list[str] = []
        for topic in self.scn.topics:
            ids = [i for b in needed for p in range(self.scn.partitions)
                   if self.scn.topic_of(p) == topic for i in self.scn.ids(str(b), p)]
            missing += audit_topic(self.broker.config(), topic, ids, settle_s=5).missing
        self.note(f"group {when}: at batch {at}'s end offsets; "
                  + (f"MISSING {len(missing)} records of batches <= {at}" if missing
                     else "every record up to it visible"))
        if missing:
            raise ScheduleFailed(f"group {self.group} {when}: at batch {at}'s end offsets, yet "
                                 f"{len(missing)} records of batches up to {at} are not visible "
                                 f"at read_committed ({missing[:3]}): the group moved past "
                                 "aborted records")

    def last_restart(self) -> None:
        """The query stops and starts once more before the audit: the recovery a restart runs
        releases commits whose markers a killed broker dropped (twopc/driver/stranded.py), which
        nothing else does while the query keeps running (counted: stranded_released)."""
        report = self.recover(self.coordinator())
        released = report.stranded.released
        self.result.stranded_released += len(released)
        self.result.steps.append(f"last restart: recovery released stranded commits "
                                 f"{list(released)}, left {report.stranded.unreleased}")
        self.scan_log()

    # ---- the audit ----------------------------------------------------------------------------

    def audit(self) -> None:
        config = self.broker.config()
        problems: list[str] = []
        for topic in self.scn.topics:
            expected = self.scn.expected.get(topic, set()) - self.lost_ids
            if not wait_until_stable(config, topic, 60):
                self.result.open_transactions += 1
                problems.append(f"{topic}: a transaction stays open (LSO < HW)")
            report = audit_topic(config, topic, sorted(expected))
            unexpected = set(report.counts) - expected
            self.result.expected += len(expected)
            self.result.found += sum(report.counts.values())
            self.result.duplicates += len(report.duplicates)
            self.result.missing += len(report.missing)
            if not report.passed or unexpected:
                problems.append(f"{topic}: {report.summary()} missing {report.missing[:5]} "
                                f"unexpected {sorted(unexpected)[:5]}")
        still_open = self.control.list_transactions(self.scn.prefix, states=[TxnState.ONGOING])
        if still_open:
            self.result.open_transactions += len(still_open)
            problems.append(f"open transactions {[t.transactional_id for t in still_open]}")
        if self.source is not None:
            last = str(max(int(b.batch) for b in self.schedule.batches))
            try:
                self.check_group(last, "at the audit", final=True)
            except ScheduleFailed as exc:
                problems.append(str(exc))
        if problems:
            self.result.error = "audit: " + "; ".join(problems)


def _batch_of(record: object) -> str:
    return str(getattr(record, "batch", ""))


def _wait_paused(proc: Any) -> bool:
    """True once the driver says it paused; False if it ended first (a guard refused, say)."""
    return any("paused at" in line for line in proc.stderr)


def _finished(proc: Any) -> dict[str, Any]:
    try:
        return finish(proc)
    except AssertionError as exc:
        return {"error": "crashed", "message": str(exc)[-500:], "rc": proc.returncode}
