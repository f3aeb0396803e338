"""kafka2pc over TLS: a batch job writes through the SASL_SSL listener (the `kafka.*` ssl and sasl
options go to librdkafka and to twopc's control client alike) and the audit over TLS passes; with a
wrong CA the job stops on the driver with TlsError naming ssl.ca.location, before any task writes
and before anything is written to the twopc log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from twopc_testing.secured import secured_configs

from twopc.broker import LocalKafka
from twopc.broker.tls import make_ca
from twopc.broker.under_test import KafkaUnderTest
from twopc.ops.audit import audit_topic

from .helpers import sink_options

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ROWS = 200


def _job(spark: Any, options: dict[str, str], tag: str) -> list[str]:
    spark.range(0, ROWS, 1, 4).selectExpr(f"concat('{tag}-', cast(id as string)) as value") \
        .write.format("kafka2pc").options(**options).option("twopc.jobId", tag) \
        .mode("append").save()
    return [f"{tag}-{i}" for i in range(ROWS)]


def test_kafka2pc_over_sasl_ssl(spark: Any, tls_kafka: LocalKafka, tmp_path: Path) -> None:
    config = secured_configs(tls_kafka)["SASL_SSL"]
    topic = KafkaUnderTest("tls", tls_kafka.bootstrap_servers, local=tls_kafka).create_topic(4)
    options = {**sink_options(config["bootstrap.servers"], topic, tmp_path),
               **{f"kafka.{k}": v for k, v in config.items()}}
    ids = _job(spark, options, "sasl-ssl")
    report = audit_topic(config, topic, ids)
    assert report.passed and report.records == ROWS, report.summary()

    wrong = make_ca(tmp_path / "other-ca", name="some other CA").cert_path
    log_dir = tmp_path / "wrong-ca-log"
    bad = {**options, "kafka.ssl.ca.location": str(wrong), "twopc.checkpoint": log_dir.as_uri()}
    with pytest.raises(Exception, match="TlsError") as info:
        _job(spark, bad, "wrong-ca")
    assert f"ssl.ca.location={wrong}" in str(info.value), str(info.value)[-2000:]
    assert "not signed by a CA this client trusts" in str(info.value)
    assert not log_dir.exists() or not any(p.is_file() for p in log_dir.rglob("*")), \
        sorted(log_dir.rglob("*"))
    after = audit_topic(config, topic, ids)
    assert after.passed and after.records == ROWS, after.summary()
