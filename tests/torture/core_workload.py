"""One torture schedule on the core protocol, with real processes, then the audit.

Tasks pre-commit in subprocesses with the real writer (tests/driver/task.py); the first commit of a
faulted batch runs in a driver subprocess (tests/driver/driver_call.py) that is SIGKILLed or paused at a
named crash point; "the restarted query" then recovers and re-runs in this process with a fresh
Coordinator, as a new Spark driver would. Each batch's outcome is read from what the coordinator
answered (CommitReport status, RecoveryReport outcomes, typed errors), never inferred from the fault.
The checkpoint log lives on `faulty://` (testing/twopc_testing/faulty_fs.py) so storage can fail or slow.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
from tests.torture.schedule import BatchPlan, Schedule, victim_role
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, TxnState
from twopc.errors import CommitUnverified, DataLossError, GuardFailed
from twopc.log.session import Session
from twopc.ops.audit import audit_topic, wait_until_stable
from twopc.protocol.copies import RepairPolicy, RepairSettings
from twopc.protocol.handle import ResultKind, WriteResult
from twopc.protocol.state import BatchStatus
from twopc.protocol.verdicts import BatchOutcome

NORMAL_TIMEOUT_MS = 30000
SHORT_TIMEOUT_MS = 4000  # the pause faults: the broker aborts within seconds
PAUSE_LIMIT_S = 60.0


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
        self.broker = broker
        self.result = result
        self.faults_file = str(workdir / "faults.json")
        self.wake_file = str(workdir / "twopc-log.wake")
        clear_control(self.faults_file)
        # This process's coordinators and every driver subprocess read the same control file.
        os.environ[CONTROL_ENV] = self.faults_file
        self.env = {CONTROL_ENV: self.faults_file}
        topics = (broker.create_topic(2), broker.create_topic(2))
        self.scn = Scenario(broker, topics, f"faulty://{workdir.resolve()}/twopc-log",
                            partitions=schedule.partitions, rows=schedule.rows,
                            timeout_ms=NORMAL_TIMEOUT_MS)
        self.control = ControlClient(broker.config())

    def close(self) -> None:
        clear_control(self.faults_file)
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
        return {"log": self.scn.log_url, "bootstrap": self.broker.bootstrap_servers,
                "owner_id": self.scn.owner_id, "prefix": self.scn.prefix, "action": action,
                "batch": batch, "results": [r.to_obj() for r in results],
                "repair_policy": "auto" if self.copy_forward else "rerun", **extra}

    def drive(self, call: dict[str, Any], crash_at: str | None = None) -> dict[str, Any]:
        try:
            return run_driver(call, crash_at, env=self.env)
        except AssertionError as exc:  # died with an untyped error (Spark would call abort)
            return {"error": "crashed", "message": str(exc)[-500:], "rc": 1}

    def paused(self, call: dict[str, Any], point: str) -> Any:
        if os.path.exists(self.wake_file):
            os.unlink(self.wake_file)
        env = {**self.env, "TWOPC_PAUSE_AT": f"coordinator.{point}",
               "TWOPC_PAUSE_UNTIL": self.wake_file,
               "TWOPC_PAUSE_SECONDS": str(PAUSE_LIMIT_S)}
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
        try:
            first = getattr(self, f"_first_{kind or 'plain'}")(plan)
        except (GuardFailed, CommitUnverified) as exc:
            # Typed answers a restarted query handles: the guard fenced the batch (a broker kill
            # took too long, say), or the commit could not check its markers.
            first = {"error": type(exc).__name__, "message": str(exc)[:500]}
        self.note(f"first attempt: {first}")
        if first.get("ok") and first["ok"].get("status") in ("committed", "repaired", "empty"):
            self.result.outcomes["committed"] += 1
            if first["ok"].get("orphans"):
                self.result.outcomes["fenced"] += 1
            self.scn.expect(plan.batch)
            return
        if first.get("restarted"):
            return  # the fault's own second driver already took the batch to its end
        self.restart(plan)

    def restart(self, plan: BatchPlan) -> None:
        """What a restarted query does: recover, then skip (committed) or write and commit."""
        batch, coord = plan.batch, self.coordinator()
        began = time.monotonic()
        report = coord.recover()
        self.result.recovery_s.append(time.monotonic() - began)
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
            status = coord.commit(batch, skipped).status
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
            status = coord.commit(batch, rerun).status
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
        for p in range(self.scn.partitions):
            if p in visible:
                self.scn.expected.setdefault(self.scn.topic_of(p), set()).update(
                    self.scn.ids(batch, p))
            else:
                self.result.reported_lost += len(self.scn.ids(batch, p))
        self.note(f"operator resolved: visible partitions {sorted(visible)}")

    # ---- the first attempt of each fault kind -------------------------------------------------

    def _first_plain(self, plan: BatchPlan) -> dict[str, Any]:
        report = self.coordinator().commit(plan.batch, self.write(plan.batch))
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
        report = self.coordinator().commit(plan.batch, results)
        return {"ok": {"status": report.status, "orphans": list(report.orphans)}}

    def victim(self, plan: BatchPlan, results: Sequence[WriteResult]) -> int | None:
        """The broker a broker fault kills: all of a single broker; on a replicated cluster the
        leader of a partition the batch wrote to, or its ids' coordinator (victim_role)."""
        if not self.broker.replicated:
            return None
        role = victim_role(self.result.seed, int(plan.batch))
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
        report = self.coordinator().commit(plan.batch, results)
        return {"ok": {"status": report.status, "orphans": list(report.orphans)}}

    def _first_broker_kill_mid_commit(self, plan: BatchPlan) -> dict[str, Any]:
        results = self.write(plan.batch)
        with self.paused(self.call("commit", plan.batch, results), "after_endtxn_1") as proc:
            if not _wait_paused(proc):
                return _finished(proc)
            node = self.victim(plan, results)
            self.broker.kill(node)
            self.result.faults["broker_kill_mid_commit"] += 1
            if plan.wake_before_restart:
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
            report = self.coordinator().commit(plan.batch, results)
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

    def last_restart(self) -> None:
        """The query stops and starts once more before the audit: the recovery a restart runs
        releases commits whose markers a killed broker dropped (twopc/driver/stranded.py), which
        nothing else does while the query keeps running (counted: stranded_released)."""
        began = time.monotonic()
        report = self.coordinator().recover()
        self.result.recovery_s.append(time.monotonic() - began)
        released = report.stranded.released
        self.result.stranded_released += len(released)
        self.result.steps.append(f"last restart: recovery released stranded commits "
                                 f"{list(released)}, left {report.stranded.unreleased}")

    # ---- the audit ----------------------------------------------------------------------------

    def audit(self) -> None:
        config = self.broker.config()
        problems: list[str] = []
        for topic in self.scn.topics:
            expected = self.scn.expected.get(topic, set())
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
        if problems:
            self.result.error = "audit: " + "; ".join(problems)


def _wait_paused(proc: Any) -> bool:
    """True once the driver says it paused; False if it ended first (a guard refused, say)."""
    return any("paused at" in line for line in proc.stderr)


def _finished(proc: Any) -> dict[str, Any]:
    try:
        return finish(proc)
    except AssertionError as exc:
        return {"error": "crashed", "message": str(exc)[-500:], "rc": proc.returncode}
