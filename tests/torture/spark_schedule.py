"""Seeded fault schedules of the Spark workload (tests/torture/spark_workload.py). Pure: the same seed
and kind give the same schedule, so a failing schedule is replayed from (seed, kind) alone.

A schedule is a few steps. A streaming step adds source files (one micro-batch each) and runs the
query until it has consumed them; a batch step runs one job (its own job id). Each step carries at
most one fault of tests/torture/result.py's FAULT_KINDS and where to inject it: a named crash point
(SIGKILL of the driver's whole session, or of one Python worker for a task failure) or a named pause
point (the commit worker stops there while the harness kills the broker, breaks the checkpoint
storage, lets the transactions time out, or starts a second driver). The point names are the core's
(tests/torture/schedule.py), with Spark's own `spark.task.precommitted.attempt0`. The control
client's request faults reach the driver-side Python workers that run the commit through the
driver's environment (TWOPC_CONTROL_FAULTS): one Spark partition's EndTxn is lost, its answer is
lost, or it is held back past the transaction timeout; and an operator fences one open
transaction while the commit is paused. The faults that need the core harness's control of each
task's start (expire_in_waves) or of the cluster (leader_down_during_check) are not drawn here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.torture.result import FAULT_KINDS
from tests.torture.schedule import (
    DRIVER_POINTS,
    PAUSE_POINTS,
    RECOVERY_POINTS,
    SECOND_DRIVER_POINTS,
    STORAGE_OPERATIONS,
    WEIGHTS,
)

# The fault kinds a Spark schedule draws.
SPARK_FAULTS: tuple[str, ...] = tuple(k for k in FAULT_KINDS
                                      if k not in ("expire_in_waves", "leader_down_during_check"))
SPARK_WEIGHTS: dict[str | None, float] = {k: w for k, w in WEIGHTS.items()
                                          if k is None or k in SPARK_FAULTS}
SPARK_PARTITIONS = 4  # the workload's topic and Spark partitions
# outside_abort: where the commit worker is paused while an operator fences one open transaction.
ABORT_POINTS: tuple[str, ...] = ("after_intent", "after_endtxn_1")

KINDS = ("streaming", "batch")
# A task that dies after its pre-commit, before Spark hears of it. Only attempt 0 dies: the retry
# (attempt 1, the next transactional id slot) succeeds, and attempt 0's transaction is an orphan.
TASK_POINT = "spark.task.precommitted.attempt0"
# With the session scope the same point kills the whole driver (in local mode the executor is in
# the driver's JVM), after the tasks pre-committed and before the commit decision.
SPARK_DRIVER_POINTS: tuple[str, ...] = (TASK_POINT, *(f"coordinator.{p}" for p in DRIVER_POINTS))
# Where the commit worker stalls for the faults that the harness injects from outside.
STORAGE_POINTS: tuple[str, ...] = ("before_intent", "after_intent", "after_endtxn_1")


@dataclass(frozen=True)
class SparkStep:
    index: int
    files: int = 1                      # streaming: new source files (micro-batches); batch: 1 job
    rows: int = 16                      # rows per file (streaming) or per job (batch)
    fault: str | None = None
    point: str | None = None            # full crash point or pause point name
    recovery_point: str | None = None   # driver_kill: also kill the restarted driver's recovery
    later_batch: bool = False           # streaming: arm the crash point after the step's 1st commit
    storage_op: str = "write"           # storage_failure: the operation that fails
    wake_before_restart: bool = False   # broker_kill_mid_commit: the driver goes on while down
    rerun_changed: bool = False         # pause_past_timeout: the partly committed batch's re-run
                                        # reads other data (DataLossError, then the operator)
    target: int = 0                     # request faults, outside_abort: the Spark partition hit

    @property
    def pause(self) -> bool:
        """Is the fault injected while the commit worker is paused (not by a crash point)?"""
        return self.fault in ("broker_kill", "broker_kill_mid_commit", "storage_failure",
                              "pause_past_timeout", "two_drivers", "outside_abort")

    def describe(self) -> str:
        head = f"step {self.index}: {self.files} file(s) x {self.rows} rows"
        if self.fault is None:
            return f"{head}: no fault"
        detail = {
            "driver_kill": f"driver session SIGKILL at {self.point}"
                           + (" (a later micro-batch)" if self.later_batch else "")
                           + (f", restarted driver SIGKILL at {self.recovery_point}"
                              if self.recovery_point else ""),
            "task_failure": f"Python worker SIGKILL at {self.point}"
                            + (" (a later micro-batch)" if self.later_batch else "")
                            + ", Spark retries the tasks",
            "broker_kill": f"broker SIGKILL + restart while paused at {self.point}",
            "broker_kill_mid_commit": f"broker SIGKILL while paused at {self.point}, driver "
                                      + ("resumes before" if self.wake_before_restart
                                         else "resumes after") + " the restart",
            "storage_failure": f"checkpoint {self.storage_op}s fail from {self.point} on",
            "storage_slow": "checkpoint storage slow for the whole run",
            "pause_past_timeout": f"commit paused at {self.point} past the transaction timeout"
                                  + (", re-run changed" if self.rerun_changed else ""),
            "two_drivers": f"first driver paused at {self.point}, a second driver runs the "
                           "same checkpoints",
            "request_lost": f"the EndTxn of partition {self.target} (slot 0) dropped before it "
                            "is sent, once per commit",
            "answer_lost": f"the answer to the EndTxn of partition {self.target} (slot 0) "
                           "dropped after the broker acted, once per commit",
            "request_delayed": f"the EndTxn of partition {self.target} (slot 0) held back past "
                               "the (short) transaction timeout",
            "outside_abort": f"an operator fences an open transaction while the commit is "
                             f"paused at {self.point}",
        }[self.fault]
        return f"{head}: {self.fault}: {detail}"


@dataclass(frozen=True)
class SparkSchedule:
    seed: int
    kind: str
    steps: tuple[SparkStep, ...]

    def describe(self) -> list[str]:
        return [f"seed {self.seed}: spark {self.kind}"] + [s.describe() for s in self.steps]


def plan_step(rng: random.Random, index: int, fault: str | None, kind: str) -> SparkStep:
    """The parameters of one step with `fault`, drawn from `rng`."""
    files = rng.choice((1, 2)) if kind == "streaming" else 1
    rows = rng.randrange(8, 25) if kind == "streaming" else rng.randrange(16, 60)
    later = files > 1 and rng.random() < 0.5
    if fault is None:
        return SparkStep(index, files, rows)
    if fault == "driver_kill":
        recovery = (f"recovery.{rng.choice(RECOVERY_POINTS)}" if rng.random() < 0.3 else None)
        return SparkStep(index, files, rows, fault, rng.choice(SPARK_DRIVER_POINTS),
                         recovery_point=recovery, later_batch=later)
    if fault == "task_failure":
        return SparkStep(index, files, rows, fault, TASK_POINT, later_batch=later)
    if fault == "broker_kill":
        return SparkStep(index, files, rows, fault, "coordinator.before_intent")
    if fault == "broker_kill_mid_commit":
        return SparkStep(index, files, rows, fault, "coordinator.after_endtxn_1",
                         wake_before_restart=rng.random() < 0.5)
    if fault == "storage_failure":
        return SparkStep(index, files, rows, fault, f"coordinator.{rng.choice(STORAGE_POINTS)}",
                         storage_op=rng.choice(STORAGE_OPERATIONS))
    if fault == "storage_slow":
        return SparkStep(index, files, rows, fault)
    if fault == "pause_past_timeout":
        point = rng.choice(PAUSE_POINTS)
        changed = point == "after_endtxn_1" and rng.random() < 0.5
        return SparkStep(index, files, rows, fault, f"coordinator.{point}", rerun_changed=changed)
    if fault == "two_drivers":
        return SparkStep(index, files, rows, fault,
                         f"coordinator.{rng.choice(SECOND_DRIVER_POINTS)}")
    if fault in ("request_lost", "answer_lost", "request_delayed"):
        return SparkStep(index, files, rows, fault, target=rng.randrange(SPARK_PARTITIONS))
    if fault == "outside_abort":
        return SparkStep(index, files, rows, fault, f"coordinator.{rng.choice(ABORT_POINTS)}",
                         target=rng.randrange(SPARK_PARTITIONS))
    raise ValueError(f"unknown fault kind {fault!r}; known: {FAULT_KINDS}")


def make_spark_schedule(seed: int, kind: str, steps: int = 2) -> SparkSchedule:
    """`steps` steps of a streaming query or of batch jobs; at least one step has a fault."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    rng = random.Random(f"spark-{kind}-{seed}")
    kinds = list(SPARK_WEIGHTS)
    faults = rng.choices(kinds, weights=[SPARK_WEIGHTS[k] for k in kinds], k=steps)
    if all(f is None for f in faults):
        faults[rng.randrange(steps)] = rng.choice(SPARK_FAULTS)
    return SparkSchedule(seed, kind, tuple(plan_step(rng, i, f, kind)
                                           for i, f in enumerate(faults)))
