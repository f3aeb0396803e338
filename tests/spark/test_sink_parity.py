"""kafka2pc against Spark's built-in Kafka sink: one frame with every column of the sink (key,
value, topic from the `topic` column, partition, headers, nulls among them) written by both with
the same `kafka.*` options, read back by a read_committed consumer and compared column by column:
each record's topic (by the frame's topic column), partition, offset order, key, value and headers.

Once with no `topic` option (each row's topic from its column), once with the `topic` option and a
topic column (the option wins, as in Spark's sink), and once over a SASL_SSL listener with the
options a format("kafka") job has there: the Java client's `sasl.jaas.config` (SCRAM) and a PEM
truststore (twopc/spark/jvm_options.py translates them). Spark's Kafka package is resolved as for
the demo (twopc.broker.artifacts)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from twopc_testing.secured import TLS_PASSWORD, TLS_USER

from twopc.broker import LocalKafka
from twopc.broker.under_test import KafkaUnderTest
from twopc.ops.audit import partition_offsets

from .helpers import errors_of, run_driver

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(1800)]

ROWS = 60
PARTITIONS = 4
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"

Record = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def read_back(bootstrap: str, topic: str) -> dict[int, list[Record]]:
    """Per partition, in offset order: (partition, key, value, headers) of every record a
    read_committed consumer reads, up to each partition's high watermark."""
    ends = {p: hw for p, (_, hw) in partition_offsets({"bootstrap.servers": bootstrap},
                                                      topic).items()}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    found: dict[int, list[Record]] = {p: [] for p in ends}
    position = dict.fromkeys(ends, 0)
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        for _ in range(600):
            if all(position[p] >= ends[p] for p in ends):
                break
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            part, offset = msg.partition(), msg.offset()
            assert part is not None and offset is not None
            error = msg.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                position[part] = max(position[part], offset)
                continue
            position[part] = offset + 1
            headers = tuple((k, v) for k, v in (msg.headers() or []))
            found[part].append((part, msg.key(), msg.value(), headers))
    finally:
        consumer.close()
    assert all(position[p] >= ends[p] for p in ends), (position, ends)
    return found


def compare(bootstrap: str, case: dict[str, Any]) -> None:
    """The built-in sink's topics and kafka2pc's hold the same records, partition by partition in
    the same order; the frame's `topic` column picked the topic (or the option all of them)."""
    pairs = list(zip(case["builtin"], case["twopc"], strict=True))
    if case.get("option"):
        pairs.append((case["option"]["builtin"], case["option"]["twopc"]))
    total = 0
    for builtin, ours in pairs:
        theirs, mine = read_back(bootstrap, builtin), read_back(bootstrap, ours)
        for column, index in (("partition", 0), ("key", 1), ("value", 2), ("headers", 3)):
            assert {p: [r[index] for r in rs] for p, rs in mine.items()} == \
                {p: [r[index] for r in rs] for p, rs in theirs.items()}, (column, builtin, ours)
        total += sum(len(rs) for rs in mine.values())
    assert total == ROWS


def cases(broker: KafkaUnderTest) -> list[dict[str, Any]]:
    def topics() -> list[str]:
        return [broker.create_topic(PARTITIONS), broker.create_topic(PARTITIONS)]

    return [{"builtin": topics(), "twopc": topics(), "option": None},
            {"builtin": topics(), "twopc": topics(),
             "option": {"builtin": broker.create_topic(PARTITIONS),
                        "twopc": broker.create_topic(PARTITIONS)}}]


def run_parity(bootstrap: str, admin_bootstrap: str, kafka: dict[str, str],
               the_cases: list[dict[str, Any]], tmp_path: Path) -> None:
    cfg = {"bootstrap": bootstrap, "topic": "unused", "checkpoint": (tmp_path / "twopc").as_uri(),
           "prefix": f"par{uuid.uuid4().hex[:6]}", "rows": ROWS, "cases": the_cases,
           "options": {f"kafka.{k}": v for k, v in kafka.items()}}
    run = run_driver("parity", cfg, timeout_s=1200)
    assert run.returncode == 0 and "RESULT " in run.stdout, errors_of(run.stderr)
    for case in the_cases:
        compare(admin_bootstrap, case)


def test_kafka2pc_writes_what_the_builtin_sink_writes(broker: KafkaUnderTest,
                                                      tmp_path: Path) -> None:
    run_parity(broker.bootstrap_servers, broker.bootstrap_servers, {}, cases(broker), tmp_path)


def test_the_java_sasl_ssl_options_of_the_builtin_sink_serve_kafka2pc(
        tls_kafka: LocalKafka, tmp_path: Path) -> None:
    assert tls_kafka.tls is not None
    admin = KafkaUnderTest("tls", tls_kafka.bootstrap_servers, local=tls_kafka)
    java = {  # what a format("kafka") job on a SASL_SSL listener is given
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM} required username="{TLS_USER}" password="{TLS_PASSWORD}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": tls_kafka.tls.client_config()["ssl.ca.location"],
    }
    run_parity(tls_kafka.sasl_ssl_bootstrap_servers, tls_kafka.bootstrap_servers, java,
               cases(admin)[:1], tmp_path)
