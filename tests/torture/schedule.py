"""Seeded fault schedules: which batch gets which fault, at which named crash point. Pure: the same
seed gives the same schedule, so a failure is replayed from its seed alone.

A schedule is a few batches of one query; each batch carries at most one fault kind of
tests/torture/result.py's FAULT_KINDS (a killed driver may also see its recovery killed), and the
parameters the workload needs to inject it. Broker kills are rarer than the rest: each costs a
broker restart. Some schedules commit source offsets with every batch (`Schedule.offsets`), so that
the source offsets' rule (docs/design.md section 9) meets the faults, and the audit checks the group.

The control client's request faults (twopc/control/faults.py) name an API and, for EndTxn, the
Spark partition whose transaction they hit; `every_retry` drops every attempt until the retry
budget is spent (the log check must then decide), else only the first. With `release` (single
broker only: a replicated cluster does not drop markers) the fault hits the release of a stranded
commit instead: the harness first makes the broker drop the batch's commit markers (a kill while
they are held back), then the release's request is lost, its answer is lost, or (outside_abort)
the release is cut short and an operator fences the held id.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.torture.result import FAULT_KINDS, REPLICATED_ONLY_FAULTS

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

# request_lost / answer_lost of a batch's own commit: its EndTxn (one Spark partition's), or with
# source offsets a request of their own transaction (on the query's offsets id): the two that add
# them before the intent, or its EndTxn after the batch is proven ("OFFSETS_" + the API's name).
COMMIT_APIS: tuple[str, ...] = ("END_TXN",)
OFFSETS_APIS: tuple[str, ...] = ("ADD_OFFSETS_TO_TXN", "TXN_OFFSET_COMMIT", "OFFSETS_END_TXN")
# The release of a stranded commit: InitProducerId (epoch e+1), AddPartitionsToTxn, EndTxn. A lost
# AddPartitionsToTxn answer or EndTxn request leaves it half done (Ongoing at e+1).
RELEASE_LOST_APIS: tuple[str, ...] = ("INIT_PRODUCER_ID", "ADD_PARTITIONS_TO_TXN", "END_TXN")
RELEASE_ANSWER_APIS: tuple[str, ...] = ("ADD_PARTITIONS_TO_TXN", "END_TXN")
# expire_in_waves: where the driver waits for the early wave to expire ("none": the early wave
# expired before the commit started; "kill": the driver is SIGKILLed after its first EndTxn and
# the restarted driver recovers once the early wave expired).
WAVE_POINTS: tuple[str, ...] = ("none", "before_intent", "after_intent", "after_endtxn_1", "kill")
# outside_abort: when the operator fences ("before_commit": between pre-commit and commit).
ABORT_POINTS: tuple[str, ...] = ("before_commit", "after_intent", "after_endtxn_1")
# leader_down_during_check: the pause point inside the marker check (DriverCall.verify_markers).
CHECK_POINT = "stranded.before_check"
RELEASE_SHARE = {"request_lost": 0.3, "answer_lost": 0.3, "outside_abort": 0.5}
OFFSETS_SHARE = 0.4  # schedules that commit source offsets with every batch

WEIGHTS: dict[str | None, float] = {
    None: 0.8, "driver_kill": 1.5, "task_failure": 1.0, "broker_kill": 0.8,
    "broker_kill_mid_commit": 0.9, "storage_failure": 1.0, "storage_slow": 0.8,
    "pause_past_timeout": 1.0, "two_drivers": 1.0, "request_lost": 0.9, "answer_lost": 0.9,
    "request_delayed": 1.0, "expire_in_waves": 1.3, "outside_abort": 1.0,
    "leader_down_during_check": 1.3,
}


def weights(replicated: bool) -> dict[str | None, float]:
    """The schedule's weights on this kind of cluster (leader_down_during_check needs several
    brokers)."""
    return {k: w for k, w in WEIGHTS.items() if replicated or k not in REPLICATED_ONLY_FAULTS}


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
    api: str | None = None              # request faults: the API (twopc.control.messages.ApiKey)
    every_retry: bool = False           # request faults: every attempt, not only the first
    release: bool = False               # the fault hits a stranded commit's release
    early: int = 0                      # expire_in_waves: the first `early` partitions expire

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
            "request_lost": f"{self.api} dropped before it is sent{self._whose()}",
            "answer_lost": f"{self.api}'s answer dropped after the broker acted{self._whose()}",
            "request_delayed": f"EndTxn of partition {self.task_partition} held back past its "
                               "timeout",
            "expire_in_waves": f"partitions 0..{self.early - 1} written first with a short "
                               f"timeout, expiring "
                               + {"none": "before the commit",
                                  "kill": "while the driver is down (SIGKILL after the first "
                                          "EndTxn)"}.get(self.point or "",
                                                         f"while paused at coordinator."
                                                         f"{self.point}"),
            "outside_abort": ("the stranded commit's release cut short (EndTxn lost), then an "
                              "operator fences the held id" if self.release else
                              f"an operator fences partition {self.task_partition}'s id "
                              + ("before the commit" if self.point == "before_commit"
                                 else f"while the driver is paused at coordinator.{self.point}")),
            "leader_down_during_check": f"the leader of the batch's first partition SIGKILLed "
                                        f"while the driver is paused at {self.point}",
        }[self.fault]
        return f"batch {self.batch}: {self.fault}: {detail}"

    def _whose(self) -> str:
        retries = ", every retry" if self.every_retry else ", once"
        if self.release:
            return f" (a stranded commit's release){retries}"
        if self.api == "END_TXN":
            return f" (partition {self.task_partition}){retries}"
        return retries


@dataclass(frozen=True)
class Schedule:
    seed: int
    partitions: int
    rows: int
    batches: tuple[BatchPlan, ...]
    offsets: bool = False  # every batch commits source offsets (twopc.commitSourceOffsets)

    def describe(self) -> list[str]:
        return [f"seed {self.seed}: {self.partitions} partitions x {self.rows} rows"
                + (", with source offsets" if self.offsets else "")] + [
            b.describe() for b in self.batches]


def victim_role(seed: int, broker_faults_before: int) -> str:
    """Which broker a run's broker fault kills on a replicated cluster, given how many broker
    faults came before it in the run: they alternate, from a role drawn from the seed.

    By the faults' ordinal, not their batch's index: the covering schedule's two broker faults sat
    ten batches apart, and by batch index both killed the coordinator. The first role is drawn
    from a hash of the seed, not its parity: the long run ties copy-forward to the seed's parity
    and places Spark schedules at a fixed stride, so parity would kill one role only in each.
    Drawn without the schedule's random stream, so that every seed still makes the schedule it
    always made; the victims of runs journaled before 2026-11-28 followed the batch-index rule."""
    first = random.Random(f"victim:{seed}").randrange(len(VICTIM_ROLES))
    return VICTIM_ROLES[(first + broker_faults_before) % len(VICTIM_ROLES)]


def plan_batch(rng: random.Random, batch: str, fault: str | None, partitions: int,
               offsets: bool = False, replicated: bool = False) -> BatchPlan:
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
    if fault in ("request_lost", "answer_lost"):
        every = rng.random() < 0.5
        if not replicated and rng.random() < RELEASE_SHARE[fault]:
            apis = RELEASE_LOST_APIS if fault == "request_lost" else RELEASE_ANSWER_APIS
            return BatchPlan(batch, fault, api=rng.choice(apis), every_retry=every, release=True)
        api = rng.choice(COMMIT_APIS + OFFSETS_APIS) if offsets else "END_TXN"
        return BatchPlan(batch, fault, api=api, every_retry=every,
                         task_partition=rng.randrange(partitions))
    if fault == "request_delayed":  # not the last partition (kept as it was: seeds replay)
        return BatchPlan(batch, fault, api="END_TXN", task_partition=rng.randrange(partitions - 1))
    if fault == "expire_in_waves":
        return BatchPlan(batch, fault, rng.choice(WAVE_POINTS), early=rng.randrange(1, partitions))
    if fault == "outside_abort":
        if not replicated and rng.random() < RELEASE_SHARE[fault]:
            return BatchPlan(batch, fault, "release", api="END_TXN", every_retry=True,
                             release=True)
        return BatchPlan(batch, fault, rng.choice(ABORT_POINTS),
                         task_partition=rng.randrange(partitions))
    if fault == "leader_down_during_check":
        if not replicated:
            raise ValueError("leader_down_during_check needs a replicated cluster")
        return BatchPlan(batch, fault, CHECK_POINT, wake_before_restart=rng.random() < 0.5)
    if fault in FAULT_KINDS:
        return BatchPlan(batch, fault)
    raise ValueError(f"unknown fault kind {fault!r}; known: {FAULT_KINDS}")


def make_schedule(seed: int, batches: int = 2, replicated: bool = False) -> Schedule:
    """A random schedule of `batches` batches; every schedule injects at least one fault.
    `replicated`: for a cluster of several brokers (kafka4-3node)."""
    rng = random.Random(seed)
    partitions = rng.choice((2, 3))
    offsets = rng.random() < OFFSETS_SHARE
    table = weights(replicated)
    kinds = list(table)
    faults = rng.choices(kinds, weights=[table[k] for k in kinds], k=batches)
    if all(f is None for f in faults):
        faults[rng.randrange(batches)] = rng.choice([k for k in kinds if k is not None])
    plans = tuple(plan_batch(rng, str(n), f, partitions, offsets, replicated)
                  for n, f in enumerate(faults))
    return Schedule(seed, partitions, 2, plans, offsets)


def covering_schedule(seed: int, replicated: bool = False) -> Schedule:
    """Every fault kind once (on one broker, all but leader_down_during_check), in a seeded order,
    with source offsets, then the batches that reach every outcome kind: partly committed re-runs
    (identical and changed: `repaired`, `data_loss_raised`, `resolved_by_operator`), driver kills
    after the intent and after every EndTxn, and (one broker) a stranded commit whose release is
    cut short and fenced by an operator (`loss_acknowledged`, when the broker drops the markers:
    it does so often, not always)."""
    rng = random.Random(seed)
    partitions = 2
    faults: list[str | None] = [k for k in FAULT_KINDS
                                if replicated or k not in REPLICATED_ONLY_FAULTS]
    rng.shuffle(faults)
    plans = []
    for n, f in enumerate(faults):
        plan = plan_batch(rng, str(n), f, partitions, True, replicated=True)  # no release here
        if f == "expire_in_waves":  # item 2's case: the early wave expires mid-commit
            plan = BatchPlan(str(n), f, "after_intent", early=1)
        elif f in ("request_lost", "answer_lost"):  # every attempt: the log check decides; the
            # answer lost is the last partition's, which the log check must prove
            plan = BatchPlan(str(n), f, api="END_TXN", every_retry=True,
                             task_partition=0 if f == "request_lost" else 1)
        plans.append(plan)
    for changed in (False, True):
        plans.append(BatchPlan(str(len(plans)), "pause_past_timeout", "after_endtxn_1",
                               rerun_changed=changed))
    # Rolled forward (an open intent) and recognised committed (every EndTxn answered).
    for point in ("after_intent", "after_all_endtxn"):
        plans.append(BatchPlan(str(len(plans)), "driver_kill", point))
    if not replicated:
        plans.append(BatchPlan(str(len(plans)), "outside_abort", "release", api="END_TXN",
                               every_retry=True, release=True))
    plans.append(BatchPlan(str(len(plans))))
    return Schedule(seed, partitions, 2, tuple(plans), offsets=True)
