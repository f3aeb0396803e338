"""The kafka2pc options and input schema: pure checks, no broker and no JVM."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from twopc.protocol.copies import RepairPolicy
from twopc.spark.errors import InputSchemaError, OptionError
from twopc.spark.options import parse_options
from twopc.spark.schema import check_schema

BASE = {
    "kafka.bootstrap.servers": "localhost:9092",
    "twopc.checkpoint": "file:///tmp/x",
    "twopc.transactionalIdPrefix": "orders",
}


def lower(options: dict[str, str]) -> dict[str, str]:
    # What Spark hands a Python data source: lower-cased keys.
    return {k.lower(): v for k, v in options.items()}


def test_minimal_options_parse_with_defaults() -> None:
    config = parse_options(lower({**BASE, "topic": "t", "kafka.linger.ms": "5"}), streaming=True)
    # The Java producer's partitioner by default, as format("kafka") (twopc/spark/jvm_options.py).
    assert config.producer_config == {"bootstrap.servers": "localhost:9092", "linger.ms": "5",
                                      "partitioner": "murmur2_random"}
    assert config.topic == "t"
    assert config.prefix == "orders"
    assert config.transaction_timeout_ms == 60_000
    assert config.job_id is None
    assert config.repair_policy is RepairPolicy.AUTO
    assert pickle.loads(pickle.dumps(config)) == config


def test_names_are_case_insensitive_and_values_keep_case() -> None:
    config = parse_options(
        {**BASE, "kafka.sasl.password": "PaSs", "TWOPC.TRANSACTIONTIMEOUTMS": "90000"}, streaming=False
    )
    assert config.producer_config["sasl.password"] == "PaSs"
    assert config.transaction_timeout_ms == 90_000


def test_repair_policy_reaches_the_driver_settings() -> None:
    from twopc.protocol.owner import Owner
    from twopc.spark.reuse import _settings

    config = parse_options(lower({**BASE, "twopc.repairPolicy": "Copy",
                                  "twopc.transactionTimeoutMs": "30000"}), streaming=False)
    repair = _settings(config, Owner.jobs("orders")).repair
    assert repair.policy is RepairPolicy.COPY and repair.transaction_timeout_ms == 30_000
    # The sink's producer settings, as its tasks get them (the Java partitioner's default
    # included: the copies name every record's partition anyway).
    assert repair.producer_config == config.producer_config
    assert repair.producer_config["bootstrap.servers"] == "localhost:9092"


@pytest.mark.parametrize(
    ("extra", "drop", "needle"),
    [
        ({}, "kafka.bootstrap.servers", "kafka.bootstrap.servers is required"),
        ({}, "twopc.checkpoint", "twopc.checkpoint is required"),
        ({}, "twopc.transactionalIdPrefix", "twopc.transactionalIdPrefix is required"),
        ({"twopc.checkpoint": "memory://x"}, None, "memory:// lives inside one process"),
        ({"twopc.transactionalIdPrefix": "a b"}, None, "letters, digits"),
        ({"twopc.transactionTimeoutMs": "soon"}, None, "must be an integer"),
        ({"twopc.transactionTimeoutMs": "10"}, None, "at least 1000"),
        ({"kafka.transactional.id": "x"}, None, "kafka.transactional.id is not allowed"),
        ({"kafka.transaction.timeout.ms": "1"}, None, "twopc.transactionTimeoutMs"),
        ({"kafka.enable.idempotence": "false"}, None, "not allowed"),
        ({"twopc.chekpoint": "x"}, None, "unknown option 'twopc.chekpoint'"),
        ({"twopc.allowUnconditionalCreate": "yes"}, None, "true or false"),
        ({"twopc.storageOptions": "[1]"}, None, "JSON object"),
        ({"topic": " "}, None, "topic is empty"),
        ({"twopc.jobId": "j1"}, None, "for batch writes"),
        ({"twopc.repairPolicy": "always"}, None, "twopc.repairPolicy: repair policy 'always'"),
        ({"twopc.metricsPort": "65536"}, None, "at most 65535"),
        ({"twopc.metricsPort": "-1"}, None, "at least 0"),
        ({"twopc.metricsPort": "http"}, None, "must be an integer"),
        ({"twopc.metricPort": "9478"}, None, "did you mean twopc.metricsPort"),
        ({"twopc.fullSweepIntervalMs": "-1"}, None, "twopc.fullSweepIntervalMs.*at least 0"),
        ({"twopc.fullSweepIntervalMs": "1m"}, None, "twopc.fullSweepIntervalMs.*must be an integer"),
    ],
)
def test_bad_options_name_the_problem(extra: dict[str, str], drop: str | None, needle: str) -> None:
    options = {**BASE, **extra}
    if drop:
        del options[drop]
    with pytest.raises(OptionError, match=needle.replace("(", r"\(")):
        parse_options(lower(options), streaming=True)


def test_metrics_port_is_for_streaming_queries() -> None:
    assert parse_options(lower(BASE), streaming=True).metrics_port is None
    config = parse_options(lower({**BASE, "twopc.metricsPort": "9478"}), streaming=True)
    assert config.metrics_port == 9478
    with pytest.raises(OptionError, match="twopc metrics"):
        parse_options({**BASE, "twopc.metricsPort": "9478", "twopc.jobId": "j"}, streaming=False)


def test_storage_options_from_json_and_prefixed_keys() -> None:
    config = parse_options(
        {**BASE, "twopc.storageOptions": '{"anon": false, "client_kwargs": {"a": 1}}',
         "twopc.storage.key": "k"},
        streaming=False,
    )
    assert config.storage_options == {"anon": False, "client_kwargs": {"a": 1}, "key": "k"}


@given(st.integers(min_value=2, max_value=64))
def test_slots_per_partition(slots: int) -> None:
    # Which slot a task takes: pool.choose_slot (tests/protocol/test_decisions.py).
    config = parse_options({**BASE, "twopc.slotsPerPartition": str(slots)}, streaming=True)
    assert config.slots == slots


def test_the_sweep_settings_reach_the_driver() -> None:
    """The driver describes the pool the tasks write with: their slots, and the interval of the
    whole pool's listing (docs/design.md section 2, step 4)."""
    from twopc.protocol.owner import Owner
    from twopc.spark.reuse import _settings

    default = _settings(parse_options(lower(BASE), streaming=True), Owner.jobs("orders"))
    assert (default.slots, default.full_sweep_interval_ms) == (8, 60_000)
    config = parse_options(lower({**BASE, "twopc.slotsPerPartition": "3",
                                  "twopc.fullSweepIntervalMs": "0",
                                  "twopc.commitMarginMs": "1000"}), streaming=True)
    settings = _settings(config, Owner.jobs("orders"))
    assert (settings.slots, settings.full_sweep_interval_ms, settings.margin_ms) == (3, 0, 1000)


HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def schema(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, dtype) for name, dtype in fields])  # type: ignore[arg-type]


def test_full_kafka_schema_is_accepted() -> None:
    layout = check_schema(
        schema(("key", BinaryType()), ("value", StringType()), ("topic", StringType()),
               ("partition", IntegerType()), ("headers", HEADERS), ("other", LongType())),
        None,
    )
    assert layout.has_key and layout.has_topic and layout.has_partition and layout.has_headers


@pytest.mark.parametrize(
    ("fields", "topic", "needle"),
    [
        ((("key", StringType()),), "t", "no 'value' column"),
        ((("value", LongType()),), "t", "value must be string or binary"),
        ((("value", StringType()), ("key", IntegerType())), "t", "key must be string or binary"),
        ((("value", StringType()),), None, "no topic"),
        ((("value", StringType()), ("partition", LongType())), "t", "partition must be an int"),
        ((("value", StringType()), ("headers", StringType())), "t", "headers must be array"),
    ],
)
def test_bad_schema_names_the_column(fields: tuple[tuple[str, object], ...], topic: str | None,
                                     needle: str) -> None:
    with pytest.raises(InputSchemaError, match=needle):
        check_schema(schema(*fields), topic)


@pytest.mark.parametrize("option", [{"kafka.acks": "1"}, {"kafka.request.required.acks": "0"}])
def test_acks_other_than_all_is_refused_on_the_driver(option: dict[str, str]) -> None:
    """The transactional producer needs acks=all (librdkafka refuses anything else once
    idempotence is on): the driver says so once, before any task starts a producer."""
    from twopc.spark.option_checks import check_producer_config

    config = parse_options(lower({**BASE, **option}), streaming=False)
    with pytest.raises(OptionError, match="`acks` must be set to `all`"):
        check_producer_config(config)


def test_a_metrics_port_in_use_is_an_option_error_naming_it() -> None:
    from twopc.spark.metrics import start_metrics

    first = start_metrics(parse_options({**BASE, "twopc.metricsPort": "0"}, streaming=True))
    assert first is not None and first.port > 0  # started without asking the cluster anything
    try:
        taken = parse_options({**BASE, "twopc.metricsPort": str(first.port)}, streaming=True)
        with pytest.raises(OptionError, match=f"twopc.metricsPort={first.port}: cannot listen"):
            start_metrics(taken)
        assert start_metrics(parse_options(BASE, streaming=True)) is None
    finally:
        first.stop()


def test_the_trigger_interval_option() -> None:
    """twopc.triggerIntervalMs: streaming only, a positive integer; checked at start against the
    timeout (TriggerIntervalError, an OptionError naming the option and the fix), before any
    connection to the cluster."""
    from twopc.spark.errors import TriggerIntervalError
    from twopc.spark.option_checks import check_at_start

    config = parse_options(lower({**BASE, "twopc.triggerIntervalMs": "30000"}), streaming=True)
    assert config.trigger_interval_ms == 30000
    assert parse_options(lower(BASE), streaming=True).trigger_interval_ms is None
    with pytest.raises(OptionError, match="is for streaming queries"):
        parse_options(lower({**BASE, "twopc.triggerIntervalMs": "1000"}), streaming=False)
    with pytest.raises(OptionError, match="at least 1"):
        parse_options(lower({**BASE, "twopc.triggerIntervalMs": "0"}), streaming=True)
    # 40 s against the default 60 s timeout: refused at start, before the producer or the
    # control client is made (the bootstrap server here answers nothing).
    too_long = parse_options(lower({**BASE, "twopc.triggerIntervalMs": "40000"}), streaming=True)
    with pytest.raises(TriggerIntervalError) as caught:
        check_at_start(too_long, streaming=True)
    assert str(caught.value).startswith("option twopc.triggerIntervalMs: a trigger interval of "
                                        "40000 ms is more than 30000 ms")
    assert "twopc.transactionTimeoutMs to at least 80000 ms" in str(caught.value)
    assert isinstance(caught.value, OptionError)
    # The commit margin counts: 5 s of a 9 s timeout leave 4 s, less than half.
    tight = parse_options(lower({**BASE, "twopc.triggerIntervalMs": "4500",
                                 "twopc.transactionTimeoutMs": "9000"}), streaming=True)
    with pytest.raises(TriggerIntervalError, match="more than 4000 ms"):
        check_at_start(tight, streaming=True)
