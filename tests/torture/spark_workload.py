"""One torture schedule over a real PySpark job (local mode) writing through kafka2pc, then the audit.

    run_spark_schedule(seed, broker, workdir, "streaming" | "batch") -> ScheduleResult

The job is tests/spark/spark_driver.py, run as its own session (testing/twopc_testing/drivers.py) so that
"kill the driver" takes its JVM and Python workers with it: a streaming query over JSON files with
unique ids (one micro-batch per file), or batch jobs of `spark.range` ids under one job id each. The
twopc log lives on `faulty://` (testing/twopc_testing/faulty_fs.py), so checkpoint storage can fail or slow.
Faults (tests/torture/spark_schedule.py) come from named crash points (TWOPC_CRASH_AT, with the
session scope and TWOPC_CRASH_WHEN_EXISTS to pick a micro-batch) or from named pause points
(TWOPC_PAUSE_AT): while the commit worker is stopped the harness kills the broker, breaks the
storage, lets the transactions time out, or runs a second driver on the same checkpoints. After each
fault the job is restarted from its checkpoints until it finishes; a last recovery (what a restart
runs first) releases what a killed broker left; then the audit. A fault is counted only when it
really happened; outcomes come from twopc's own records and reports (spark_outcomes.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twopc_testing.faulty_fs import CONTROL_ENV, clear_control, write_control

from checkpoint import open_log
from tests.spark.helpers import DRIVER, errors_of
from tests.torture.result import ScheduleResult, run_to_verdict
from tests.torture.schedule import victim_role
from tests.torture.spark_outcomes import Appended, classify, recovery_reports
from tests.torture.spark_schedule import SparkSchedule, SparkStep, make_spark_schedule
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, TxnState
from twopc.control import faults as cf
from twopc.demo.drivers import DriverProcess, write_json_files
from twopc.driver.call import DriverSettings
from twopc.driver.observe import recovery_summary
from twopc.driver.recovery import Recovery
from twopc.ops.audit import audit_topic, wait_until_stable
from twopc.protocol.log_records import Copying, Partial, Prepared, from_body
from twopc.protocol.owner import Owner
from twopc.protocol.pool import transactional_id
from twopc.spark.driver import query_id_from_spark_checkpoint

MASTER = "local[2,4]"  # local[N,F]: up to 4 attempts per task, so a killed task is retried
RUN_LIMIT_S = 480.0  # one driver run; far above the ~15 s a run takes, and a broker restart
# the harness does meanwhile (up to START_TIMEOUT_S) on a loaded machine
PAUSE_LIMIT_S = 180.0  # a paused commit wakes by itself after this (the harness wakes it first)
SHORT_TIMEOUT_MS = 6000  # pause_past_timeout: the broker aborts the batch within seconds
SHORT_MARGIN_MS = 1000
STORAGE_FAULT_S = 20.0  # how long injected storage failures stay on after the wake
RESTARTS = 3  # clean restarts after a fault before the schedule is declared stuck


class ScheduleFailed(AssertionError):
    """The harness saw something the protocol promises cannot happen, or a job that never ends."""


@dataclass
class Run:
    index: int
    label: str
    rc: int | None
    ok: bool  # the driver printed its RESULT line
    stderr: str
    seconds: float

    def errors(self) -> str:
        return errors_of(self.stderr, 1200)


def run_spark_schedule(seed: int, broker: KafkaUnderTest, workdir: Path, kind: str) -> ScheduleResult:
    schedule = make_spark_schedule(seed, kind)
    result = ScheduleResult(f"spark-{kind}", seed, broker.variant, steps=schedule.describe())
    began = time.monotonic()
    job = _SparkJob(schedule, broker, workdir, result)

    def body() -> None:
        for step in schedule.steps:
            job.step(step)
        job.last_recovery()
        job.classify()
        job.audit()

    return run_to_verdict(result, began, body, job.close)


class _SparkJob:
    def __init__(self, schedule: SparkSchedule, broker: KafkaUnderTest, workdir: Path,
                 result: ScheduleResult) -> None:
        self.workdir = workdir.resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.schedule, self.broker, self.result = schedule, broker, result
        self.streaming = schedule.kind == "streaming"
        self.topic = broker.create_topic(4)
        self.prefix = f"sp{schedule.seed % 100000}{uuid.uuid4().hex[:6]}"
        self.log_url = f"faulty://{self.workdir}/twopc"
        self.source = self.workdir / "in"
        self.spark_checkpoint = self.workdir / "spark"
        self.faults_file = str(self.workdir / "faults.json")
        clear_control(self.faults_file)
        # The control client's request faults, read by the driver-side Python workers.
        self.requests_file = str(self.workdir / "control-faults.json")
        self.fired_file = str(self.workdir / "control-fired.jsonl")
        self.control = ControlClient(broker.config())
        self.expected: list[str] = []
        self.files = 0
        self.runs: list[Run] = []
        self.appended: dict[int, Appended] = {}
        self.first_run: dict[str, int] = {}
        self.batches: list[str] = []
        self.reports: list[dict[str, Any]] = []
        self.shift: dict[int, int] = {}  # batch jobs: step -> offset of a changed re-run's ids
        self.partly: set[str] = set()  # ids of batches resolved by the operator after a loss
        self.reported_lost = 0  # records twopc recorded as lost (aborted part of a partial batch)
        self.changed_reruns = 0
        self.live: list[DriverProcess] = []  # drivers started and not yet ended (close kills them)

    def close(self) -> None:
        # A driver still running when the schedule ends early (the long run stopped by SIGTERM
        # mid-run: SystemExit is no Exception) leads its own session: kill it, or it outlives us.
        for proc in self.live:
            proc.close()
        self.live.clear()
        clear_control(self.faults_file)
        self.control.close()

    def note(self, text: str) -> None:
        self.result.steps.append("  " + text)

    # ---- driver runs --------------------------------------------------------------------------

    def config(self, step: SparkStep, options: dict[str, str] | None = None) -> dict[str, Any]:
        cfg: dict[str, Any] = {
            "master": MASTER, "bootstrap": self.broker.bootstrap_servers, "topic": self.topic,
            "checkpoint": self.log_url, "prefix": self.prefix, "options": options or {}}
        if self.streaming:
            cfg.update(source=str(self.source), spark_checkpoint=str(self.spark_checkpoint))
        else:
            cfg.update(job_id=self.job_id(step), rows=step.rows,
                       first=self.first_id(step) + self.shift.get(step.index, 0))
        return cfg

    def job_id(self, step: SparkStep) -> str:
        return f"job-{step.index}"

    def first_id(self, step: SparkStep) -> int:
        return sum(s.rows for s in self.schedule.steps[:step.index])

    def start(self, label: str, step: SparkStep, env: dict[str, str] | None = None,
              options: dict[str, str] | None = None) -> tuple[int, DriverProcess, list[str]]:
        index = len(self.runs)
        self.runs.append(Run(index, label, None, False, "", 0.0))
        if not self.streaming:
            self.first_run.setdefault(self.job_id(step), index)
        argv = [sys.executable, str(DRIVER), "stream" if self.streaming else "batch",
                json.dumps(self.config(step, options))]
        full_env = {CONTROL_ENV: self.faults_file, cf.CONTROL_ENV: self.requests_file,
                    "PYSPARK_PYTHON": sys.executable, **(env or {})}
        proc = DriverProcess(argv, self.workdir / f"run{index}.err", full_env)
        self.live.append(proc)
        out: list[str] = []
        threading.Thread(target=lambda: out.extend(proc.lines()), daemon=True).start()
        return index, proc, out

    def end(self, index: int, proc: DriverProcess, out: list[str], began: float) -> Run:
        try:
            rc: int | None = proc.wait(max(1.0, RUN_LIMIT_S - (time.monotonic() - began)))
        except Exception:  # subprocess.TimeoutExpired: a stuck job is a finding
            rc = None
        proc.close()
        self.live.remove(proc)
        stderr = proc.stderr_path.read_text(errors="replace")
        run = Run(index, self.runs[index].label, rc, any(line.startswith("RESULT ") for line in out),
                  stderr, time.monotonic() - began)
        self.runs[index] = run
        self.reports.extend(recovery_reports(stderr))
        self.collect(index)
        self.note(f"run {index} ({run.label}): rc {rc}, {'ok' if run.ok else 'failed'}, "
                  f"{run.seconds:.1f}s" + ("" if run.ok or rc == -9 else
                                           f": {_last_error(run.stderr)}"))
        if rc is None:
            raise ScheduleFailed(f"run {index} ({run.label}) did not end within {RUN_LIMIT_S}s: "
                                 f"{run.errors()}")
        return run

    def run(self, label: str, step: SparkStep, env: dict[str, str] | None = None,
            options: dict[str, str] | None = None,
            watch: Callable[[], None] | None = None) -> Run:
        began = time.monotonic()
        index, proc, out = self.start(label, step, env, options)
        if watch is not None:
            while proc.proc.poll() is None and time.monotonic() - began < RUN_LIMIT_S:
                watch()
                time.sleep(0.05)
        return self.end(index, proc, out, began)

    def collect(self, run: int) -> None:
        """Every record the log holds now that was not seen before, tagged with `run`; and, for
        a streaming query, the micro-batches Spark has planned so far (offsets/<id>)."""
        clear_control(self.faults_file)  # the harness's own reads must not be faulted
        log = open_log(self.log_url)
        for rec in log.records():
            if rec.seq not in self.appended:
                self.appended[rec.seq] = Appended(rec.seq, from_body(rec.body), run)
        if self.streaming:
            for batch in _spark_batches(self.spark_checkpoint / "offsets"):
                if batch not in self.first_run:
                    self.first_run[batch] = run
                    self.batches.append(batch)

    def finish(self, step: SparkStep, previous: Run) -> None:
        """Restart the job from its checkpoints until it finishes."""
        last, first = previous, True
        for n in range(RESTARTS):
            if last.ok:
                return
            run = self.run(f"restart {n + 1}", step)
            if first:
                self.result.recovery_s.append(run.seconds)  # restart to done, Spark start-up included
                first = False
            last = run
        if not last.ok:
            raise ScheduleFailed(f"step {step.index}: the job did not finish after {RESTARTS} "
                                 f"restarts: {last.errors()}")

    # ---- one step -----------------------------------------------------------------------------

    def step(self, step: SparkStep) -> None:
        self.result.steps.append(step.describe())
        if self.streaming:
            tag = f"{self.prefix}-s{step.index}"
            self.expected += write_json_files(self.source, step.files, step.rows, tag,
                                              first=self.files)
            self.files += step.files
        else:
            first = self.first_id(step)
            self.expected += [f"{self.prefix}-{i}" for i in range(first, first + step.rows)]
            self.batches.append(self.job_id(step))
        if step.fault in ("driver_kill", "task_failure"):
            last = self.crash(step)
        elif step.pause:
            last = self.paused(step)
        elif step.fault in ("request_lost", "answer_lost", "request_delayed"):
            last = self.request_fault(step)
        elif step.fault == "storage_slow":
            write_control(self.faults_file, delay_s=0.1)
            self.result.faults["storage_slow"] += 1
            last = self.run("slow storage", step)
        else:
            last = self.run("plain", step)
        if step.rerun_changed:
            last = self.changed_rerun(step, last)
        self.finish(step, last)

    def crash(self, step: SparkStep) -> Run:
        assert step.point is not None
        arm = self.workdir / f"arm-{step.index}"
        env = {"TWOPC_CRASH_AT": step.point, "TWOPC_CRASH_WHEN_EXISTS": str(arm)}
        if step.fault == "driver_kill":
            env["TWOPC_CRASH_SCOPE"] = "session"
        committed_before = len(_spark_batches(self.spark_checkpoint / "commits"))
        watch: Callable[[], None] | None = None
        if step.later_batch:
            def watch() -> None:
                # The step's first micro-batch is committed: arm the point for the next one.
                if len(_spark_batches(self.spark_checkpoint / "commits")) > committed_before:
                    arm.touch()
        else:
            arm.touch()
        run = self.run(step.fault or "", step, env, watch=watch)
        arm.unlink(missing_ok=True)
        if step.fault == "task_failure":
            retried = [h for a in self.appended.values() if a.run == run.index
                       and isinstance(a.record, Prepared) for h in a.record.handles if h.attempt > 0]
            if retried:
                self.result.faults["task_failure"] += 1
            self.note(f"tasks retried after the kill: {sorted(h.transactional_id for h in retried)}")
            return run
        if run.rc == -9:
            self.result.faults["driver_kill"] += 1
        if run.rc == -9 and step.recovery_point:
            again = self.run(f"recovery kill at {step.recovery_point}", step,
                             {"TWOPC_CRASH_AT": step.recovery_point, "TWOPC_CRASH_SCOPE": "session"})
            if again.rc == -9:
                self.result.faults["driver_kill"] += 1
            return again
        return run

    def request_fault(self, step: SparkStep) -> Run:
        """One Spark partition's EndTxn (slot 0) meets the fault in the commit worker, once per
        worker process: PySpark runs each commit in a fresh one."""
        assert step.fault is not None
        tid = transactional_id(self.prefix, step.target, 0)
        action, delay, options = {
            "request_lost": (cf.Action.DROP_REQUEST, 0.0, None),
            "answer_lost": (cf.Action.DROP_ANSWER, 0.0, None),
            "request_delayed": (cf.Action.DELAY, SHORT_TIMEOUT_MS / 1000 + 3, {
                "twopc.transactionTimeoutMs": str(SHORT_TIMEOUT_MS),
                "twopc.commitMarginMs": str(SHORT_MARGIN_MS)}),
        }[step.fault]
        before = len(cf.read_fired(self.fired_file))
        cf.write_control(self.requests_file, cf.FaultPlan(
            (cf.Fault("END_TXN", action, transactional_id=tid, count=1, delay_s=delay),),
            log=self.fired_file))
        try:
            run = self.run(step.fault, step, options=options)
        finally:
            if os.path.exists(self.requests_file):
                os.unlink(self.requests_file)
        fired = cf.read_fired(self.fired_file)[before:]
        for f in fired:
            self.result.fired[f"{f.api} {f.action}"] += 1
        self.note(f"fired: {[(f.api, f.action, f.transactional_id) for f in fired]}")
        if fired:
            self.result.faults[step.fault] += 1
        return run

    def paused(self, step: SparkStep) -> Run:
        assert step.point is not None and step.fault is not None
        wake = self.workdir / f"wake-{step.index}"
        env = {"TWOPC_PAUSE_AT": step.point, "TWOPC_PAUSE_UNTIL": str(wake),
               "TWOPC_PAUSE_SECONDS": str(PAUSE_LIMIT_S)}
        options = ({"twopc.transactionTimeoutMs": str(SHORT_TIMEOUT_MS),
                    "twopc.commitMarginMs": str(SHORT_MARGIN_MS)}
                   if step.fault == "pause_past_timeout" else None)
        began = time.monotonic()
        index, proc, out = self.start(step.fault, step, env, options)
        if not _wait_paused(proc, began):
            self.note(f"the commit never paused at {step.point}: no {step.fault} injected")
            return self.end(index, proc, out, began)
        getattr(self, f"_while_paused_{step.fault}")(step, index, wake)
        wake.touch()
        if step.fault == "storage_failure":  # leave the failures on while the commit goes on
            deadline = time.monotonic() + STORAGE_FAULT_S
            while proc.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            clear_control(self.faults_file)
        run = self.end(index, proc, out, began)
        # PySpark shows only the last exception of a worker's traceback, not its cause (the
        # injected StorageFault): the typed error is what reaches the driver.
        if step.fault == "storage_failure" and any(
                e.startswith("StorageUnavailable") for e in _typed_errors(run.stderr)):
            self.result.faults["storage_failure"] += 1
        if step.fault == "two_drivers":
            stopped = any(e.startswith("LogOwnershipLost") for e in _typed_errors(run.stderr))
            # A batch job whose intent the second driver rolled forward reports the job committed:
            # its own transactions are the visible ones (issue 30, item 4; the audit checks it).
            finished = (not self.streaming and run.ok
                        and step.point == "coordinator.after_intent")
            if not (stopped or finished):
                raise ScheduleFailed("the first driver, woken after a second one took over its "
                                     f"checkpoint, was not stopped by the log: {run.errors()}")
            self.result.outcomes["fenced" if stopped else "rolled_forward"] += 1
        return run

    def changed_rerun(self, step: SparkStep, last: Run) -> Run:
        """A partly committed batch whose re-run reads other data. Under the default repair
        policy (`twopc.repairPolicy` auto) twopc copies the aborted part forward from the
        topic's own copy and fences the re-run's rows: the audit then finds every original
        record once and none of the re-run's. Where the copy cannot be verified it must refuse
        the re-run (DataLossError), and the operator accepts the loss with `twopc recover
        --resolve`."""
        partial = [a.record for a in self.appended.values()
                   if a.run == last.index and isinstance(a.record, Partial)]
        if last.ok or not partial:
            self.note("no partly committed batch: nothing to re-run with other data")
            return last
        record = partial[0]
        if self.streaming:  # rewrite the stalled micro-batch's file(s) in place
            original = []
            for index in _source_files(self.spark_checkpoint, record.batch):
                original += [f"{self.prefix}-s{step.index}-{index}-{r}" for r in range(step.rows)]
                write_json_files(self.source, 1, step.rows, f"{self.prefix}-chg{step.index}",
                                 first=index)
            if not original:
                raise ScheduleFailed(f"Spark's checkpoint names no file of batch {record.batch}")
        else:
            first = self.first_id(step)
            original = [f"{self.prefix}-{i}" for i in range(first, first + step.rows)]
            self.shift[step.index] = 1_000_000
        rerun = self.run("changed re-run", step)
        self.shift.pop(step.index, None)
        copied = [a for a in self.appended.values() if a.run == rerun.index
                  and isinstance(a.record, Copying) and a.record.batch == record.batch]
        if rerun.ok and copied:
            # The originals stay expected, the re-run's rows (other ids) are not: the audit
            # proves the copy whole and the re-run fenced.
            self.result.outcomes["copied_forward"] += 1
            self.note(f"batch {record.batch}: its aborted part copied forward from the log "
                      "(default repair policy), the changed re-run's rows fenced")
            return rerun
        if not any(e.startswith("DataLossError") for e in _typed_errors(rerun.stderr)):
            raise ScheduleFailed(f"batch {record.batch}: a re-run with other data than its visible "
                                 f"part was not refused with DataLossError: {rerun.errors()}")
        self.changed_reruns += 1
        self.operator_resolves(record.batch)
        intent = next(a.record for a in self.appended.values() if isinstance(a.record, Prepared)
                      and a.seq == record.intent_seq)
        assert isinstance(intent, Prepared)
        lost = sum(h.record_count for h in intent.handles if h.transactional_id in record.aborted)
        self.reported_lost += lost
        self.partly.update(original)
        self.expected = [i for i in self.expected if i not in self.partly]
        self.note(f"operator resolved batch {record.batch} as committed: twopc names {lost} "
                  f"records of it lost (partitions of {list(record.aborted)})")
        return rerun

    def operator_resolves(self, batch: str) -> None:
        command = [sys.executable, "-m", "twopc.cli", "recover", "--checkpoint", self.log_url,
                   "--bootstrap-servers", self.broker.bootstrap_servers, "--resolve", batch,
                   "--decision", "committed", "--yes",
                   "--note", f"torture seed {self.schedule.seed}: accept the loss"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                              env={**os.environ, CONTROL_ENV: self.faults_file})
        if done.returncode != 0:
            raise ScheduleFailed(f"twopc recover --resolve {batch} failed ({done.returncode}): "
                                 f"{done.stdout[-800:]} {done.stderr[-800:]}")
        self.collect(len(self.runs) - 1)

    def victim(self, step: SparkStep) -> int | None:
        """All of a single broker; on a replicated cluster the leader of partition 0 or the
        coordinator of the query's ids (slot 0 of the 4 Spark partitions): schedule.victim_role."""
        if not self.broker.replicated:
            return None
        role = victim_role(self.schedule.seed, sum(self.result.victims.values()))
        ids = [transactional_id(self.prefix, p, 0) for p in range(4)]
        node = self.broker.victim(self.control, role, ids, [(self.topic, 0)])
        self.result.victims[role] += 1
        self.note(f"broker {node} is the {role}: it is the one killed")
        return node

    def _while_paused_broker_kill(self, step: SparkStep, run: int, wake: Path) -> None:
        node = self.victim(step)
        self.broker.kill(node)
        self.broker.restart(node)
        self.result.faults["broker_kill"] += 1

    def _while_paused_broker_kill_mid_commit(self, step: SparkStep, run: int, wake: Path) -> None:
        node = self.victim(step)
        self.broker.kill(node)
        self.result.faults["broker_kill_mid_commit"] += 1
        if step.wake_before_restart:
            wake.touch()
            time.sleep(0.5)
        self.broker.restart(node)

    def _while_paused_storage_failure(self, step: SparkStep, run: int, wake: Path) -> None:
        write_control(self.faults_file, fail=(step.storage_op,), match="records/")

    def _while_paused_pause_past_timeout(self, step: SparkStep, run: int, wake: Path) -> None:
        deadline = time.monotonic() + 60
        while self.control.list_transactions(self.prefix, states=[TxnState.ONGOING]):
            if time.monotonic() > deadline:
                raise ScheduleFailed("the paused batch's transactions never timed out")
            time.sleep(0.2)
        self.result.faults["pause_past_timeout"] += 1

    def _while_paused_outside_abort(self, step: SparkStep, run: int, wake: Path) -> None:
        """An operator fences one of the query's open transactions (`twopc txn fence`)."""
        open_ids = sorted(t.transactional_id for t in self.control.list_transactions(
            self.prefix, states=[TxnState.ONGOING]))
        if not open_ids:
            self.note("no open transaction to fence")
            return
        tid = open_ids[step.target % len(open_ids)]
        done = subprocess.run(
            [sys.executable, "-m", "twopc.cli", "txn", "fence", "--bootstrap-servers",
             self.broker.bootstrap_servers, tid], capture_output=True, text=True, timeout=120,
            env={k: v for k, v in os.environ.items() if not k.startswith("TWOPC_")})
        self.note(f"operator: twopc txn fence {tid} -> rc {done.returncode} "
                  f"{done.stdout.strip()[:200]}")
        if done.returncode == 0:
            self.result.faults["outside_abort"] += 1

    def _while_paused_two_drivers(self, step: SparkStep, run: int, wake: Path) -> None:
        self.collect(run)  # what the first driver wrote before it stopped is its own
        self.result.faults["two_drivers"] += 1
        second = self.run("second driver", step)
        if not second.ok:
            self.note("the second driver did not finish: the restarts will")

    # ---- the end ------------------------------------------------------------------------------

    def last_recovery(self) -> None:
        """What the next restart runs first (here, in-process): it releases commits whose markers
        a killed broker dropped, which nothing else does once the job has stopped."""
        clear_control(self.faults_file)
        if self.streaming:
            owner = Owner.query(query_id_from_spark_checkpoint(str(self.spark_checkpoint)),
                                self.prefix)
        else:
            owner = Owner.jobs(self.prefix)
        recovery = Recovery(open_log(self.log_url), self.control, DriverSettings(owner))
        began = time.monotonic()
        report = recovery.recover()
        self.result.recovery_s.append(time.monotonic() - began)
        self.reports.append(recovery_summary(report, where="last"))
        self.result.stranded_released += len(report.stranded.released)
        self.runs.append(Run(len(self.runs), "last recovery", 0, True, "", 0.0))
        self.collect(len(self.runs) - 1)
        self.result.steps.append(f"last recovery: {report.summary()}")

    def classify(self) -> None:
        found = classify(sorted(self.appended.values(), key=lambda a: a.seq), self.reports,
                         self.first_run, self.batches)
        self.result.outcomes.update(found.outcomes)
        self.note(f"outcomes by batch: {found.by_batch}")
        refusals = sum(e.startswith("DataLossError") for run in self.runs
                       for e in set(_typed_errors(run.stderr)))
        if refusals > self.changed_reruns:
            self.result.error = "DataLossError raised for an identical re-run"
        if found.problems:
            self.result.error = "twopc log: " + "; ".join(found.problems)

    def audit(self) -> None:
        config = self.broker.config()
        problems: list[str] = []
        if not wait_until_stable(config, self.topic, 60):
            self.result.open_transactions += 1
            problems.append(f"{self.topic}: a transaction stays open (LSO < HW)")
        report = audit_topic(config, self.topic, self.expected)
        # Of a batch resolved after a loss, exactly what twopc named lost is missing.
        lost = self.partly - set(report.counts)
        if len(lost) != self.reported_lost:
            problems.append(f"twopc recorded {self.reported_lost} records lost, the topic lacks "
                            f"{len(lost)} of the resolved batches' records")
        self.result.reported_lost += self.reported_lost
        expected = set(self.expected) | (self.partly - lost)
        unexpected = set(report.counts) - expected
        self.result.expected += len(expected)
        self.result.found += sum(report.counts.values())
        self.result.duplicates += len(report.duplicates)
        self.result.missing += len(report.missing)
        if not report.passed or unexpected:
            problems.append(f"{report.summary()}; missing {report.missing[:5]} duplicated "
                            f"{sorted(report.duplicates)[:5]} unexpected {sorted(unexpected)[:5]}")
        still_open = self.control.list_transactions(self.prefix, states=[TxnState.ONGOING])
        if still_open:
            self.result.open_transactions += len(still_open)
            problems.append(f"open transactions {[t.transactional_id for t in still_open]}")
        if problems:
            self.result.error = "; ".join(filter(None, [self.result.error, "audit: "
                                                        + "; ".join(problems)]))


def _spark_batches(directory: Path) -> list[str]:
    """Micro-batch ids with a file in Spark's offsets/ or commits/ directory."""
    if not directory.is_dir():
        return []
    return sorted((p.name for p in directory.iterdir() if p.name.isdigit()), key=int)


def _source_files(spark_checkpoint: Path, batch: str) -> list[int]:
    """The numbers of the source files (fNNN.json) that micro-batch `batch` read, from the file
    source's log in Spark's checkpoint (`sources/0/<batch>`: a version line, then one JSON line
    per file, with its batchId; `.compact` once Spark compacts it, every 10 batches by default)."""
    for name in (batch, f"{batch}.compact"):
        path = spark_checkpoint / "sources" / "0" / name
        if path.exists():
            lines = path.read_text().splitlines()[1:]
            entries = [json.loads(line) for line in lines if line.strip()]
            names = [Path(e["path"]).name for e in entries if str(e.get("batchId")) == batch]
            return [int(n[1:4]) for n in names if n.startswith("f") and n.endswith(".json")]
    return []


def _wait_paused(proc: DriverProcess, began: float) -> bool:
    """True once the driver says a worker paused; False if the driver ended first."""
    while time.monotonic() - began < RUN_LIMIT_S:
        if "twopc: paused at" in proc.stderr_path.read_text(errors="replace"):
            return True
        if proc.proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def _typed_errors(stderr: str) -> list[str]:
    """The typed errors (twopc's and the checkpoint's) in a driver's stderr, as `Class: message`."""
    return [m.group(1) for m in _TYPED.finditer(stderr)]


_TYPED = re.compile(r"^(?:twopc|checkpoint)\.[\w.]*?\.?(\w+(?:Error|Lost|Failed|Aborted|Committed|"
                    r"Unavailable|Mismatch|Refused)\b.*)$", re.MULTILINE)


def _last_error(stderr: str) -> str:
    """The last typed error of a driver run, else its last Python exception line."""
    typed = _typed_errors(stderr)
    if typed:
        return typed[-1][:300]
    lines = [line.strip() for line in stderr.splitlines()
             if re.match(r"^\w+(Error|Exception)\b", line.strip())]
    return lines[-1][:300] if lines else "(no error line)"
