"""Shared helpers of the core integration tests: pre-commit in a subprocess, drive in a subprocess,
audit the topics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twopc_testing.kafka_tools import abort_hanging

from checkpoint import Log, open_log
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, TxnState
from twopc.crashpoints import TEST_HOOKS_VAR
from twopc.driver.call import DriverSettings
from twopc.driver.coordinator import AbortReport, CommitReport, Coordinator
from twopc.driver.recovery import Recovery
from twopc.driver.recovery_report import RecoveryReport
from twopc.log.gate import Gate
from twopc.log.session import check_binding
from twopc.ops.audit import audit_topic, wait_until_stable
from twopc.protocol.handle import Handle, WriteResult
from twopc.protocol.offsets import SourceOffsets
from twopc.protocol.owner import Owner, OwnerKind
from twopc.protocol.pool import transactional_id
from twopc.protocol.verdicts import BatchOutcome

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Scenario:
    """One query (or, with owner_kind "job", one family of batch jobs) writing batches of
    `partitions` Spark partitions to two topics."""

    broker: KafkaUnderTest
    topics: tuple[str, str]
    log_url: str
    prefix: str = field(default_factory=lambda: f"q{uuid.uuid4().hex[:8]}")
    owner_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    partitions: int = 4
    rows: int = 5
    timeout_ms: int = 60000
    owner_kind: str = "query"  # "job": the batches are batch jobs' ids (kept in the log's index)
    expected: dict[str, set[str]] = field(default_factory=dict)

    def ids(self, batch: str, p: int, tag: str = "") -> list[str]:
        return [f"{self.prefix}-b{batch}-p{p}{tag}-r{i}" for i in range(self.rows)]

    def topic_of(self, p: int) -> str:
        return self.topics[p % 2]

    def txn(self, batch: str, p: int, attempt: int = 0, tag: str = "",
            slot: int | None = None) -> dict[str, Any]:
        return {"tid": transactional_id(self.prefix, p, attempt if slot is None else slot),
                "topic": self.topic_of(p), "partition": (p // 2) % 2, "p": p,
                "attempt": attempt, "ids": self.ids(batch, p, tag)}

    def write(self, batch: str, txns: Sequence[dict[str, Any]] | None = None,
              timeout_ms: int | None = None) -> list[WriteResult]:
        """Pre-commit the batch (every partition, or `txns`) in a separate process."""
        txns = [self.txn(batch, p) for p in range(self.partitions)] if txns is None else txns
        return precommit(self.broker.bootstrap_servers, batch, txns,
                         timeout_ms or self.timeout_ms)

    def write_real(self, batch: str, txns: Sequence[dict[str, Any]] | None = None,
                   timeout_ms: int | None = None, crash_at: str | None = None,
                   env: dict[str, str] | None = None) -> list[WriteResult] | None:
        """Like `write`, with the real writer (tests/driver/task.py); None if the task process was
        SIGKILLed at `crash_at` (a writer crash point). `env`: more environment for the task
        process (test hooks such as TWOPC_CLOCK_SKEW_MS)."""
        txns = [self.txn(batch, p) for p in range(self.partitions)] if txns is None else txns
        return run_tasks(self.broker.bootstrap_servers, batch, txns,
                         timeout_ms or self.timeout_ms, crash_at, env)

    def expect(self, batch: str, tag: str = "", partitions: Iterable[int] | None = None) -> None:
        """The rows of `batch` (of its Spark `partitions`, default all) must end up visible
        exactly once."""
        for p in range(self.partitions) if partitions is None else partitions:
            self.expected.setdefault(self.topic_of(p), set()).update(self.ids(batch, p, tag))

    def driver(self, control: ControlClient, **kw: Any) -> DriverUnderTest:
        kw.setdefault("margin_ms", 2000)
        kw.setdefault("settle_wait_ms", 30000)
        return DriverUnderTest(open_log(self.log_url), control, self.owner_kind, self.owner_id,
                               self.prefix, **kw)

    def drive(self, action: str, batch: str, results: Sequence[WriteResult] = (),
              crash_at: str | None = None, stderr: bool = False,
              **extra: Any) -> dict[str, Any]:
        return run_driver({"log": self.log_url, "bootstrap": self.broker.bootstrap_servers,
                           "owner_id": self.owner_id, "owner_kind": self.owner_kind,
                           "prefix": self.prefix, "action": action,
                           "batch": batch, "results": [r.to_obj() for r in results], **extra},
                          crash_at, stderr=stderr)

    def audit(self) -> None:
        """Exactly once: each expected id once, nothing else, and no open transaction."""
        config = self.broker.config()
        for topic in self.topics:
            assert wait_until_stable(config, topic, 60), f"{topic}: a transaction stays open"
            report = audit_topic(config, topic, sorted(self.expected.get(topic, set())))
            assert report.passed, report.summary() + f" missing {report.missing[:5]}"
            assert set(report.counts) == self.expected.get(topic, set()), (
                f"{topic}: unexpected ids {sorted(set(report.counts) - self.expected[topic])[:5]}")


class DriverUnderTest:
    """The driver's tools over one log as one object, for the tests: the coordinator (commit,
    abort), the recovery (recover, resolve) and the executors' gate. Production opens them apart
    (twopc/spark/reuse.py); each call still reads the log afresh."""

    def __init__(self, log: Log, control: ControlClient, owner_kind: str, owner_id: str,
                 prefix: str, **settings: Any) -> None:
        self.log = log
        self.control = control
        self.settings = DriverSettings(Owner(OwnerKind(owner_kind), owner_id, prefix), **settings)
        self.coordinator = Coordinator(log, control, self.settings)
        self.recovery = Recovery(log, control, self.settings)
        self.gate = Gate(log, self.settings.owner)

    def bind(self) -> None:
        check_binding(self.log, self.settings.owner, create=True)

    def commit(self, batch: str, results: Sequence[WriteResult | None],
               offsets: SourceOffsets | None = None) -> CommitReport:
        return self.coordinator.commit(batch, results, offsets)

    def abort(self, batch: str, results: Sequence[WriteResult | None]) -> AbortReport:
        return self.coordinator.abort(batch, results)

    def recover(self, **kw: Any) -> RecoveryReport:
        return self.recovery.recover(**kw)

    def resolve(self, batch: str, decision: str, note: str) -> None:
        self.recovery.resolve(batch, decision, note)

    def is_committed(self, batch: str) -> bool:
        return self.gate.is_committed(batch)

    def task_slot(self, batch: str, task_partition: int, attempt: int, slots: int) -> int | None:
        return self.gate.task_slot(batch, task_partition, attempt, slots)


def precommit(bootstrap: str, batch: str, txns: Sequence[dict[str, Any]],
              timeout_ms: int) -> list[WriteResult]:
    spec = {"bootstrap": bootstrap, "batch": batch, "timeout_ms": timeout_ms, "txns": list(txns)}
    proc = subprocess.run([sys.executable, "-m", "tests.driver.precommit"], input=json.dumps(spec),
                          capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert proc.returncode == 0, f"precommit failed: {proc.stdout} {proc.stderr[-2000:]}"
    return [WriteResult.from_obj(o) for o in json.loads(proc.stdout.strip().splitlines()[-1])]


def run_tasks(bootstrap: str, batch: str, txns: Sequence[dict[str, Any]], timeout_ms: int,
              crash_at: str | None = None,
              more_env: dict[str, str] | None = None) -> list[WriteResult] | None:
    spec = {"bootstrap": bootstrap, "batch": batch, "timeout_ms": timeout_ms, "txns": list(txns)}
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWOPC_") or k == TEST_HOOKS_VAR}
    env.update(more_env or {})
    if crash_at:
        env["TWOPC_CRASH_AT"] = crash_at
    proc = subprocess.run([sys.executable, "-m", "tests.driver.task"], input=json.dumps(spec),
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
                          check=False)
    if crash_at and proc.returncode == -signal.SIGKILL:
        return None
    assert proc.returncode == 0, f"task failed (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return [WriteResult.from_obj(o) for o in json.loads(proc.stdout.strip().splitlines()[-1])]


def run_driver(call: dict[str, Any], crash_at: str | None = None,
               env: dict[str, str] | None = None, stderr: bool = False) -> dict[str, Any]:
    """Run one driver call in a fresh process; {"killed": True} if it died by SIGKILL. With
    `stderr`, the answer's "stderr" holds the tail of the process's stderr (its log lines)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TWOPC_") or k == TEST_HOOKS_VAR}
    full_env.update(env or {})
    if crash_at:
        full_env["TWOPC_CRASH_AT"] = crash_at
    proc = subprocess.run([sys.executable, "-m", "tests.driver.driver_call"], input=json.dumps(call),
                          capture_output=True, text=True, cwd=ROOT, env=full_env, timeout=180,
                          check=False)
    if proc.returncode == -signal.SIGKILL:
        return {"killed": True}
    lines = proc.stdout.strip().splitlines()
    assert lines, f"driver printed nothing (rc {proc.returncode}): {proc.stderr[-3000:]}"
    out: dict[str, Any] = json.loads(lines[-1])
    out["rc"] = proc.returncode
    if stderr:
        out["stderr"] = proc.stderr[-5000:]
    return out


@contextmanager
def started_driver(call: dict[str, Any], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """A driver call running in the background (for the paused-driver tests)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TWOPC_") or k == TEST_HOOKS_VAR}
    full_env.update(env)
    proc = subprocess.Popen([sys.executable, "-m", "tests.driver.driver_call"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=full_env, start_new_session=True)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(call))
    proc.stdin.close()
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None and proc.stderr is not None
    out = proc.stdout.read()  # the stdin side is already closed: read both ends directly
    err = proc.stderr.read()
    proc.wait(timeout=180)
    lines = out.strip().splitlines()
    assert lines, f"driver printed nothing (rc {proc.returncode}): {err[-3000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    result["rc"] = proc.returncode
    return result


def wait_not_ongoing(control: ControlClient, handles: list[Handle], limit_s: float = 30) -> None:
    """Until the broker has aborted the timed-out transactions (bounded)."""
    deadline = time.monotonic() + limit_s
    ids = [h.transactional_id for h in handles]
    while time.monotonic() < deadline:
        described = control.describe_transactions(ids)
        if all(not (d.state is TxnState.ONGOING and any(d.holds(h.producer_id, h.epoch)
                                                        for h in handles))
               for d in described.values()):
            return
        time.sleep(0.25)
    raise AssertionError(f"transactions {ids} were not aborted by their timeout")


def partly_committed(scenario: Scenario, control: ControlClient) -> list[WriteResult]:
    """Batch 0 with partitions 0-2 committed and partition 3 aborted by its timeout."""
    long = scenario.write("0", [scenario.txn("0", p) for p in range(3)])
    short = scenario.write("0", [scenario.txn("0", 3)], timeout_ms=4000)
    results = long + short
    # EndTxn order: the first alone, the middle ones, then the last (the short one): die before it.
    out = scenario.drive("commit", "0", results, crash_at="coordinator.after_endtxn_n_minus_1",
                         margin_ms=200)
    assert out == {"killed": True}
    wait_not_ongoing(control, [r.handle for r in short if r.handle is not None])
    report = scenario.driver(control).recover()
    assert report.batches[0].outcome is BatchOutcome.PARTIAL
    assert report.batches[0].committed_partitions == [0, 1, 2]
    assert report.batches[0].lost_partitions == [3]
    return results


def abort_from_outside(scenario: Scenario, result: WriteResult) -> Handle:
    """Kafka's own `kafka-transactions.sh abort` of one pre-committed transaction (one span): ABORT
    markers on its partition, the transaction coordinator not told. Returns its handle."""
    victim = result.handle
    assert victim is not None
    [span] = victim.spans
    abort_hanging(scenario.broker.bootstrap_servers, span.topic, span.partition, span.first_offset)
    return victim

