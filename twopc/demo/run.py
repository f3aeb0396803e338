"""The demo's script: broker, source, a streaming driver killed mid-commit, its restart, the audit.

Each driver run is `python -m twopc.demo.job` leading its own session (twopc_testing.drivers). The kill
is the crash-point mechanism (twopc.crashpoints): the driver's processes SIGKILL their whole session
at the named step, once the parent has created the "arm" file after the batch before the chosen one.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twopc.broker.under_test import KafkaUnderTest
from twopc.crashpoints import ARM_FILE_VAR, ENV_VAR, SCOPE_VAR, test_hooks_env
from twopc.demo.drivers import DriverProcess, write_json_files
from twopc.demo.job import KAFKA_AFTER_WRITE, PREFIX
from twopc.demo.narrate import RecoverySummary, committed_figures, intent_figures, summarize_recovery
from twopc.ops.audit import AuditReport, audit_topic, partition_offsets
from twopc.protocol.state import BatchState, BatchStatus

SINKS = ("kafka2pc", "kafka")
KILL_POINTS = ("coordinator.before_intent", "coordinator.after_intent", "coordinator.after_endtxn_1",
               "coordinator.after_endtxn_n_minus_1", "coordinator.after_all_endtxn",
               "coordinator.after_committed_record")

Say = Callable[[str], None]


class DemoError(Exception):
    """The demo could not run as planned (bad arguments, a driver that failed or was not killed)."""


@dataclass(frozen=True)
class DemoConfig:
    records: int = 2000
    batches: int = 5
    kill_batch: int = 2
    kill_at: str = "coordinator.after_intent"
    sink: str = "kafka2pc"
    partitions: int = 4
    workdir: Path | None = None

    def check(self) -> None:
        if self.sink not in SINKS:
            raise DemoError(f"--sink must be one of {SINKS}, got {self.sink!r}")
        if self.kill_at not in KILL_POINTS:
            raise DemoError(f"--kill-at must be one of {', '.join(KILL_POINTS)}; got {self.kill_at!r}")
        if self.batches < 2 or self.records < self.batches or self.records % self.batches:
            raise DemoError("--records must be a multiple of --batches, and --batches at least 2 "
                            f"(got {self.records} records, {self.batches} batches)")
        if not 0 <= self.kill_batch < self.batches:
            raise DemoError(f"the kill batch must be one of 0..{self.batches - 1}")


@dataclass
class DemoOutcome:
    sink: str
    kill_point: str
    killed_batch: int | None = None
    committed_batches: list[int] = field(default_factory=list)
    recovery: RecoverySummary | None = None
    audit: AuditReport | None = None
    workdir: str = ""
    elapsed_s: float = 0.0

    @property
    def passed(self) -> bool:
        """kafka2pc: the audit passed. The built-in sink: the duplicates were shown (and only those)."""
        a = self.audit
        if a is None or self.killed_batch is None:
            return False
        if self.sink == "kafka":
            return bool(a.duplicates) and not a.missing and not a.lagging
        return a.passed

    @property
    def verdict(self) -> str:
        a = self.audit
        if a is None:
            return "FAIL"
        if self.sink == "kafka":
            return ("DUPLICATES (expected for the built-in sink)" if self.passed
                    else "FAIL (the built-in sink's duplicates were not shown)")
        return "PASS (exactly once)" if self.passed else "FAIL"

    def as_dict(self) -> dict[str, Any]:
        a = self.audit
        return {
            "sink": self.sink, "kill_point": self.kill_point, "killed_batch": self.killed_batch,
            "committed_batches": self.committed_batches,
            "recovery": self.recovery.as_dict() if self.recovery else None,
            "expected": a.expected if a else None, "found": a.records if a else None,
            "distinct": a.unique if a else None,
            "duplicates": len(a.duplicates) if a else None,
            "missing": len(a.missing) if a else None,
            "open_transactions": len(a.lagging) if a else None,
            "verdict": self.verdict, "passed": self.passed,
            "audit": a.as_dict() if a else None,
            "workdir": self.workdir, "elapsed_s": round(self.elapsed_s, 1),
        }

    def summary_lines(self) -> list[str]:
        a = self.audit
        if a is None:
            return [f"verdict: {self.verdict}"]
        lines = [f"records expected: {a.expected}", f"records found:    {a.records} (read_committed)",
                 f"duplicates:       {len(a.duplicates)}" + (
                     f" ids, {sum(a.duplicates.values()) - len(a.duplicates)} extra records"
                     if a.duplicates else ""),
                 f"missing:          {len(a.missing)}",
                 f"open transactions: {len(a.lagging)} partitions held back",
                 f"verdict:          {self.verdict}"]
        if a.duplicates:
            by_file = Counter(rid.split("-")[1] for rid in a.duplicates if rid.count("-") == 2)
            lines.insert(3, "duplicated ids by source file (= batch): "
                         + ", ".join(f"batch {f}: {n}" for f, n in sorted(by_file.items())))
        return lines


class _Log:
    """The parent's read-only view of the twopc log (the driver writes it)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def state(self) -> tuple[dict[str, BatchState], int]:
        from checkpoint import open_log
        from twopc.log.session import Session

        session = Session(open_log(self.url))
        return dict(session.state.batches), session.state.last_seq

    def since(self, seq: int) -> list[tuple[int, Any]]:
        from checkpoint import open_log
        from twopc.protocol.log_records import from_body

        return [(r.seq, from_body(r.body)) for r in open_log(self.url).since(seq)]


class Demo:
    def __init__(self, kafka: KafkaUnderTest, config: DemoConfig, say: Say,
                 jars: list[str] | None = None) -> None:
        config.check()
        self.kafka = kafka
        self.cfg = config
        self.say = say
        self.jars = jars or []
        self._temp = config.workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="twopc-demo-")) if config.workdir is None \
            else config.workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log = _Log((self.workdir / "twopc-checkpoint").as_uri())
        self.outcome = DemoOutcome(config.sink, config.kill_at if config.sink == "kafka2pc"
                                   else "after the batch's Kafka write, before Spark's commit log",
                                   workdir=str(self.workdir))
        self.topic = ""
        self._seq_at_kill = -1
        self._pending: list[BatchState] = []

    # ---- the script ---------------------------------------------------------------------------

    def run(self) -> DemoOutcome:
        began = time.monotonic()
        cfg = self.cfg
        topic = self.topic = self._create_topic()
        per_batch = cfg.records // cfg.batches
        ids = write_json_files(self.workdir / "source", cfg.batches, per_batch, "demo")
        self.say(f"source: {cfg.batches} JSON files of {per_batch} records with unique ids in "
                 f"{self.workdir / 'source'} (one file per micro-batch: replayable)")
        self.say(f"topic {topic} ({cfg.partitions} partitions); sink: "
                 + ("kafka2pc (exactly once, two-phase commit)" if cfg.sink == "kafka2pc"
                    else "Spark's built-in Kafka writer (at least once), in foreachBatch"))
        job = {
            "bootstrap": self.kafka.bootstrap_servers, "topic": topic,
            "source": str(self.workdir / "source"),
            "spark_checkpoint": str(self.workdir / "spark-checkpoint"),
            "twopc_checkpoint": self.log.url, "prefix": topic,
            "partitions": cfg.partitions, "sink": cfg.sink, "jars": self.jars,
        }
        point = cfg.kill_at if cfg.sink == "kafka2pc" else KAFKA_AFTER_WRITE
        arm = self.workdir / "kill-armed"
        # The demo kills its own driver on purpose: it arms the test hooks in that child alone.
        crash_env = test_hooks_env(**{ENV_VAR: point, SCOPE_VAR: "session", ARM_FILE_VAR: str(arm)})
        self.say("starting the streaming Spark driver (local[2]) ...")
        rc = self._drive(job, "driver-1", crash_env, arm)
        if rc != -9:
            raise DemoError(f"the driver was not killed (exit code {rc}): see {self.workdir}/driver-1.err")
        self._after_kill()
        self.say("restarting the driver from the same Spark checkpoint"
                 + (" and twopc checkpoint ..." if cfg.sink == "kafka2pc" else " ..."))
        rc = self._drive(job, "driver-2", {}, None)
        if rc != 0:
            raise DemoError(f"the restarted driver failed (exit code {rc})")
        if cfg.sink == "kafka2pc" and self.outcome.recovery is None:
            self._narrate_recovery()
        self.say("auditing the topic as a read_committed consumer ...")
        self.outcome.audit = audit_topic(self.kafka.config(), topic, ids, settle_s=15)
        self.outcome.elapsed_s = time.monotonic() - began
        return self.outcome

    def _create_topic(self) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        name = f"demo-{uuid.uuid4().hex[:10]}"
        # log_level 3: librdkafka would otherwise report its own clean-up at info level on stderr.
        admin = AdminClient({**self.kafka.config(), "log_level": 3})
        admin.create_topics([NewTopic(name, self.cfg.partitions)], operation_timeout=30)[name].result(60)
        return name

    def cleanup(self) -> None:
        """Remove a temporary work directory unless the demo failed (then it is evidence)."""
        if self._temp and self.outcome.passed:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ---- steps --------------------------------------------------------------------------------

    def _drive(self, job: dict[str, Any], name: str, env: dict[str, str], arm: Path | None) -> int:
        argv = [sys.executable, "-m", "twopc.demo.job", json.dumps(job)]
        restarted = arm is None
        with DriverProcess(argv, self.workdir / f"{name}.err", env) as driver:
            if arm is not None and self.cfg.kill_batch == 0:
                self._arm(arm)
            for line in driver.lines():
                if not line.startswith(PREFIX):
                    continue
                event = json.loads(line[len(PREFIX):])
                if event["event"] == "progress":
                    if restarted and self.outcome.recovery is None and self.cfg.sink == "kafka2pc":
                        self._narrate_recovery()
                    self._progress(int(event["batch"]), int(event["rows"]), restarted)
                    if arm is not None and event["batch"] == self.cfg.kill_batch - 1:
                        self._arm(arm)
            rc = driver.wait()
            if rc not in (0, -9):
                self.say(f"driver {name} failed (exit {rc}); its errors:\n{driver.errors()}")
        return rc

    def _arm(self, arm: Path) -> None:
        where = (self.cfg.kill_at if self.cfg.sink == "kafka2pc"
                 else "the end of the next batch's Kafka write, before Spark's commit log")
        self.say(f"arming the kill: the driver will SIGKILL itself and its whole session (Python "
                 f"driver, JVM, Python workers) at {where}")
        arm.touch()

    def _progress(self, batch: int, rows: int, restarted: bool) -> None:
        if self.cfg.sink == "kafka":
            again = " again" if restarted and batch == self.outcome.killed_batch else ""
            self.say(f"batch {batch} written{again}: {rows} records (no transactions) and Spark "
                     "committed it")
            self.outcome.committed_batches.append(batch)
            return
        states, _ = self.log.state()
        state = states.get(str(batch))
        if restarted and batch == self.outcome.killed_batch:
            self.say(f"batch {batch} re-run by Spark (no commits/{batch} in its checkpoint): its "
                     "tasks found it committed in the twopc log and wrote nothing")
        elif state is not None and state.status is BatchStatus.COMMITTED:
            fig = committed_figures(state)
            self.say(f"batch {batch} committed: {fig.records} records in {fig.transactions} "
                     "transactions")
        else:
            status = state.status.value if state else "not in the twopc log"
            self.say(f"batch {batch} done by Spark ({rows} rows), twopc log: {status}")
        self.outcome.committed_batches.append(batch)

    def _after_kill(self) -> None:
        cfg = self.cfg
        if cfg.sink == "kafka":
            done = self.outcome.committed_batches
            self.outcome.killed_batch = (max(done) + 1) if done else 0
            self.say(f"driver killed (SIGKILL) after batch {self.outcome.killed_batch}'s records "
                     f"reached Kafka, before Spark wrote commits/{self.outcome.killed_batch}")
            return
        states, self._seq_at_kill = self.log.state()
        pending = self._pending = [s for s in states.values() if s.status is BatchStatus.PREPARED]
        lag = sum(hw - lso for lso, hw in partition_offsets(self.kafka.config(),
                                                             self.topic).values())
        if not pending:
            done = self.outcome.committed_batches
            self.outcome.killed_batch = (max(done) + 1) if done else 0
            self.say(f"driver killed (SIGKILL) at {cfg.kill_at} during batch "
                     f"{self.outcome.killed_batch}: the twopc log holds no intent for it")
        else:
            self.outcome.killed_batch = int(pending[0].batch)
            fig = intent_figures(pending[0])
            self.say(f"driver killed (SIGKILL) at {cfg.kill_at} during batch {pending[0].batch}: "
                     f"the twopc log holds its intent ({fig.transactions} transactions, {fig.records} "
                     "records) and no outcome")
        self.say(f"{lag} records are held back from read_committed consumers by open transactions")

    def _narrate_recovery(self) -> None:
        since = self.log.since(self._seq_at_kill)
        self.outcome.recovery = summarize_recovery(self._pending, since)
        for line in self.outcome.recovery.lines():
            self.say("restarted: " + line)
