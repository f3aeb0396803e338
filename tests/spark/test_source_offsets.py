"""Kafka to Kafka with twopc.commitSourceOffsets, on the real broker and real Spark: a query reads a
topic with Spark's Kafka source (its package resolved as for the demo) and writes another through
kafka2pc; after each commit the group's committed offsets equal the batch's end offsets in Spark's
offsets log. The driver's whole process group is SIGKILLed mid-commit; until the batch is
committed and proven visible, and its offsets' own transaction committed after that, the group
stays at the previous batch; a batch killed before its intent (aborted by the restart's recovery)
leaves the offsets unchanged, and the audit finds every record exactly once."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient
from twopc.ops.audit import audit_topic

from .helpers import errors_of, run_driver

# Two or more Spark drivers per test, each starting a JVM and reading Kafka for the first time: on a
# loaded machine that outlasts the suite's default per-test bound (which is no speed assertion).
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(1800)]

SOURCE_PARTITIONS = 3
PER_ROUND = 30


def values(tag: str, n: int = PER_ROUND) -> list[str]:
    return [f"{tag}-{i}" for i in range(n)]


def rounds_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("ROUND "):]) for line in stdout.splitlines()
            if line.startswith("ROUND ")]


def committed(broker: KafkaUnderTest, group: str, ends: list[list[Any]]) -> list[list[Any]]:
    """The group's last committed offsets, without waiting for an open transaction that holds
    newer ones pending (require_stable off)."""
    with ControlClient(broker.config()) as control:
        answer = control.group_offsets(group, [(t, p) for t, p, _ in ends], require_stable=False)
    return [[t, p, answer.partitions[(t, p)].offset] for t, p, _ in ends]


def check_rounds(run: Any, expected: int) -> list[dict[str, Any]]:
    found = rounds_of(run.stdout)
    assert len(found) == expected, (found, errors_of(run.stderr))
    for r in found:
        # After each commit: the group is exactly at the end offsets of the batch just committed.
        assert r["group"] == r["ends"], r
    return found


# A generous bound on one driver run (Spark's start and its first Kafka read take a minute on a
# loaded machine); never an assertion about speed.
RUN_S = 900


def kill_env(point: str, arm: Path) -> dict[str, str]:
    return {"TWOPC_CRASH_AT": point, "TWOPC_CRASH_SCOPE": "session",
            "TWOPC_CRASH_WHEN_EXISTS": str(arm)}


def test_offsets_follow_each_commit_through_a_driver_kill(
        broker: KafkaUnderTest, source_setup: dict[str, Any], tmp_path: Path) -> None:
    # Run 1: a batch, a batch whose rows are all filtered out (no transaction: the offsets still
    # move), then a batch killed once all its transactions but the last committed.
    run1 = [{"values": values("r0")}, {"values": values("drop-r1")},
            {"values": values("r2"), "arm": True}]
    first = run_driver("kafka", {**source_setup, "rounds": run1},
                       env=kill_env("coordinator.after_endtxn_n_minus_1", tmp_path / "arm"),
                       timeout_s=RUN_S)
    assert first.returncode == -signal.SIGKILL, (first.returncode, errors_of(first.stderr))
    done = check_rounds(first, 2)
    # The batch's offsets wait in their own open transaction: the group stays at the last batch.
    assert committed(broker, source_setup["group"], done[-1]["ends"]) == done[-1]["ends"]

    # Run 2: recovery rolls the killed batch forward and moves its offsets, its re-run writes
    # nothing, and two more rounds commit batch by batch, each checked as in run 1.
    second = run_driver("kafka", {**source_setup, "rounds": [{"values": values("r3")},
                                                      {"values": values("r4")}]},
                        timeout_s=RUN_S)
    assert second.returncode == 0, errors_of(second.stderr)
    rounds = check_rounds(second, 2)
    assert sum(o for _, _, o in rounds[-1]["ends"]) == 5 * PER_ROUND
    written = values("r0") + values("r2") + values("r3") + values("r4")
    report = audit_topic(broker.config(), source_setup["topic"], written)
    assert report.passed, report.summary()


@pytest.mark.slow
@pytest.mark.parametrize("point", ["coordinator.before_intent", "coordinator.after_intent",
                                   "coordinator.after_endtxn_1", "coordinator.after_all_endtxn",
                                   "coordinator.after_committed_record"])
def test_driver_killed_at_point(point: str, broker: KafkaUnderTest, source_setup: dict[str, Any],
                                tmp_path: Path) -> None:
    first = run_driver("kafka", {**source_setup, "rounds": [{"values": values("a")},
                                                     {"values": values("b"), "arm": True}]},
                       env=kill_env(point, tmp_path / "arm"), timeout_s=RUN_S)
    assert first.returncode == -signal.SIGKILL, (first.returncode, errors_of(first.stderr))
    [done] = check_rounds(first, 1)
    # At every point the batch's offsets wait in their own transaction (they move only after the
    # batch is proven visible): the group stays at the last batch. Before the intent nothing is
    # decided: the restart's recovery aborts the batch, offsets too.
    assert committed(broker, source_setup["group"], done["ends"]) == done["ends"]
    restarted = run_driver("kafka", {**source_setup, "rounds": [{"values": values("c")}]},
                           timeout_s=RUN_S)
    assert restarted.returncode == 0, errors_of(restarted.stderr)
    [last] = check_rounds(restarted, 1)
    assert sum(o for _, _, o in last["ends"]) == 3 * PER_ROUND
    report = audit_topic(broker.config(), source_setup["topic"], values("a") + values("b") + values("c"))
    assert report.passed, report.summary()


@pytest.mark.slow
def test_source_on_another_cluster(broker: KafkaUnderTest, source_setup: dict[str, Any]) -> None:
    """The offsets go to the cluster written to. Until that cluster has a topic of the source's
    name, it refuses them: the batch aborts whole through Spark's abort() (nothing visible, the
    group unchanged); with a placeholder topic there, the re-run commits records and offsets."""
    from twopc.broker import LocalKafka

    with LocalKafka() as other:
        source = KafkaUnderTest("source", other.bootstrap_servers, local=other)
        name = source.create_topic(SOURCE_PARTITIONS, name=source_setup["source_topic"] + "-src")
        cfg = {**source_setup, "source_bootstrap": other.bootstrap_servers, "source_topic": name}
        refused = run_driver("kafka", {**cfg, "rounds": [{"values": values("x")}]},
                             timeout_s=RUN_S)
        assert refused.returncode not in (0, -signal.SIGKILL), errors_of(refused.stderr)
        assert "SourceOffsetsRefused" in refused.stderr, errors_of(refused.stderr)
        assert "UNKNOWN_TOPIC_OR_PARTITION" in refused.stderr
        assert rounds_of(refused.stdout) == []
        ends = [[name, p, 0] for p in range(SOURCE_PARTITIONS)]
        assert committed(broker, source_setup["group"], ends) == [[name, p, -1] for p in range(3)]
        assert audit_topic(broker.config(), source_setup["topic"], []).passed  # nothing visible

        broker.create_topic(SOURCE_PARTITIONS, name=name)  # an empty placeholder on the target
        again = run_driver("kafka", {**cfg, "rounds": [{"values": values("y")}]}, timeout_s=RUN_S)
        assert again.returncode == 0, errors_of(again.stderr)
        [last] = check_rounds(again, 1)
        assert sum(o for _, _, o in last["ends"]) == 2 * PER_ROUND
    report = audit_topic(broker.config(), source_setup["topic"], values("x") + values("y"))
    assert report.passed, report.summary()
