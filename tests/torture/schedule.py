"""Seeded fault schedules: which batch gets which fault, at which named crash point. Pure: the same
seed gives the same schedule, so a failure is replayed from its seed alone.

A schedule is a few batches of one query; each batch carries at most one fault kind of
tests/torture/result.py's FAULT_KINDS (a killed driver may also see its recovery killed), and the
parameters the workload needs to inject it. Broker kills are rarer than the rest: each costs a
broker restart.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.torture.result import FAULT_KINDS

# Named crash points of the core (twopc/driver/coordinator.py and settle.py, twopc/executor/writer.py).
DRIVER_POINTS: tuple[str, ...] = (
    "before_intent", "after_intent", "after_endtxn_1", "after_endtxn_n_minus_1",
    "after_all_endtxn", "after_committed_record", "during_sweep",
)
RECOVERY_POINTS: tuple[str, ...] = ("after_record", "after_rollforward", "after_outcome",
                                    "during_sweep")
# "Task failure after writing": the task dies with its transaction open.
WRITER_POINTS: tuple[str, ...] = ("after_flush", "after_identify")
# Where a driver stalls past the timeout: before the intent the re-run writes the batch again;
# after the first EndTxn the batch is partly committed (repaired or DataLossError).
PAUSE_POINTS: tuple[str, ...] = ("before_intent", "after_intent", "after_endtxn_1")
# Where the first of two drivers stalls while the second takes over the checkpoint.
SECOND_DRIVER_POINTS: tuple[str, ...] = ("before_intent", "after_intent")
STORAGE_OPERATIONS: tuple[str, ...] = ("read", "write")
# On a replicated cluster (kafka4-3node) a broker fault kills one broker, the one holding a role for
# the batch: the leader of a partition it wrote to, or the transaction coordinator of its ids.
VICTIM_ROLES: tuple[str, ...] = ("leader", "coordinator")

WEIGHTS: dict[str | None, float] = {
    None: 1.0, "driver_kill": 2.0, "task_failure": 1.0, "broker_kill": 0.5,
    "broker_kill_mid_commit": 0.5, "storage_failure": 1.0, "storage_slow": 0.7,
    "pause_past_timeout": 1.2, "two_drivers": 1.0,
}


@dataclass(frozen=True)
class BatchPlan:
    batch: str
    fault: str | None = None
    point: str | None = None            # coordinator/writer point of the fault, by kind
    recovery_point: str | None = None   # driver_kill: also kill the first recovery here
    task_partition: int = 0             # task_failure: the partition whose task dies
    storage_op: str = "write"           # storage_failure: the failing operation
    storage_after: int = 0              # storage_failure: matching operations that pass first
    wake_before_restart: bool = False   # broker_kill_mid_commit: the driver goes on while down
    rerun_changed: bool = False         # a partly committed batch's re-run writes other data

    def describe(self) -> str:
        if self.fault is None:
            return f"batch {self.batch}: no fault"
        detail = {
            "driver_kill": f"driver SIGKILL at coordinator.{self.point}"
                           + (f", recovery SIGKILL at recovery.{self.recovery_point}"
                              if self.recovery_point else ""),
            "task_failure": f"task of partition {self.task_partition} SIGKILL at "
                            f"writer.{self.point}, retried",
            "broker_kill": "broker SIGKILL + restart between pre-commit and commit",
            "broker_kill_mid_commit": "broker SIGKILL after the first EndTxn, driver "
                                      + ("resumes before" if self.wake_before_restart
                                         else "resumes after") + " the restart",
            "storage_failure": f"checkpoint {self.storage_op}s of records fail after "
                               f"{self.storage_after} ops",
            "storage_slow": "checkpoint storage slow during the commit",
            "pause_past_timeout": f"driver paused past the timeout at coordinator.{self.point}"
                                  + (", re-run changed" if self.rerun_changed else ""),
            "two_drivers": f"first driver paused at coordinator.{self.point}, a second driver "
                           "takes over the checkpoint",
        }[self.fault]
        return f"batch {self.batch}: {self.fault}: {detail}"


@dataclass(frozen=True)
class Schedule:
    seed: int
    partitions: int
    rows: int
    batches: tuple[BatchPlan, ...]

    def describe(self) -> list[str]:
        return [f"seed {self.seed}: {self.partitions} partitions x {self.rows} rows"] + [
            b.describe() for b in self.batches]


def victim_role(seed: int, batch_index: int) -> str:
    """Which broker a broker fault of batch `batch_index` kills on a replicated cluster; they
    alternate. Drawn without the schedule's random stream, so that every seed still replays the
    schedule it always made."""
    return VICTIM_ROLES[(seed + batch_index) % len(VICTIM_ROLES)]


def plan_batch(rng: random.Random, batch: str, fault: str | None, partitions: int) -> BatchPlan:
    """The parameters of one batch with `fault` (drawn from `rng`)."""
    if fault is None:
        return BatchPlan(batch)
    if fault == "driver_kill":
        recovery = rng.choice(RECOVERY_POINTS) if rng.random() < 0.3 else None
        return BatchPlan(batch, fault, rng.choice(DRIVER_POINTS), recovery_point=recovery)
    if fault == "task_failure":
        return BatchPlan(batch, fault, rng.choice(WRITER_POINTS),
                         task_partition=rng.randrange(partitions))
    if fault == "broker_kill_mid_commit":
        return BatchPlan(batch, fault, "after_endtxn_1", wake_before_restart=rng.random() < 0.5)
    if fault == "storage_failure":
        return BatchPlan(batch, fault, storage_op=rng.choice(STORAGE_OPERATIONS),
                         storage_after=rng.randrange(4))
    if fault == "pause_past_timeout":
        return BatchPlan(batch, fault, rng.choice(PAUSE_POINTS), rerun_changed=rng.random() < 0.5)
    if fault == "two_drivers":
        return BatchPlan(batch, fault, rng.choice(SECOND_DRIVER_POINTS))
    if fault in FAULT_KINDS:
        return BatchPlan(batch, fault)
    raise ValueError(f"unknown fault kind {fault!r}; known: {FAULT_KINDS}")


def make_schedule(seed: int, batches: int = 2) -> Schedule:
    """A random schedule of `batches` batches; every schedule injects at least one fault."""
    rng = random.Random(seed)
    partitions = rng.choice((2, 3))
    kinds = list(WEIGHTS)
    faults = rng.choices(kinds, weights=[WEIGHTS[k] for k in kinds], k=batches)
    if all(f is None for f in faults):
        faults[rng.randrange(batches)] = rng.choice(FAULT_KINDS)
    plans = tuple(plan_batch(rng, str(n), f, partitions) for n, f in enumerate(faults))
    return Schedule(seed, partitions, 2, plans)


def covering_schedule(seed: int) -> Schedule:
    """Every fault kind once, in a seeded order, then the batches that reach every outcome kind:
    partly committed re-runs (identical and changed: `repaired`, `data_loss_raised`,
    `resolved_by_operator`) and driver kills after the intent and after every EndTxn."""
    rng = random.Random(seed)
    partitions = 2
    faults: list[str | None] = [*FAULT_KINDS]
    rng.shuffle(faults)
    plans = [plan_batch(rng, str(n), f, partitions) for n, f in enumerate(faults)]
    for changed in (False, True):
        plans.append(BatchPlan(str(len(plans)), "pause_past_timeout", "after_endtxn_1",
                               rerun_changed=changed))
    # Rolled forward (an open intent) and recognised committed (every EndTxn answered).
    for point in ("after_intent", "after_all_endtxn"):
        plans.append(BatchPlan(str(len(plans)), "driver_kill", point))
    plans.append(BatchPlan(str(len(plans))))
    return Schedule(seed, partitions, 2, tuple(plans))
