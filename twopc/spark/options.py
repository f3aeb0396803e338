"""The options of the kafka2pc sink, parsed and checked into a typed config. Pure: no I/O.

Option names follow Spark's built-in Kafka sink (`topic`, `kafka.*`) plus twopc's own `twopc.*` ones.
Spark hands a Python data source its options with lower-cased keys, so every name here is matched
case-insensitively; values keep their case (passwords, URLs).

Design: docs/design.md section 7.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from checkpoint.redact import redacted_repr
from twopc.protocol.clock import DEFAULT_MARGIN_MS
from twopc.protocol.copies import RepairPolicy, parse_policy
from twopc.protocol.pool import DEFAULT_FULL_SWEEP_INTERVAL_MS, DEFAULT_SLOTS
from twopc.spark.errors import OptionError
from twopc.spark.jvm_options import librdkafka_settings

KAFKA_PREFIX = "kafka."
STORAGE_PREFIX = "twopc.storage."

CHECKPOINT = "twopc.checkpoint"
PREFIX = "twopc.transactionalIdPrefix"
TIMEOUT = "twopc.transactionTimeoutMs"
JOB_ID = "twopc.jobId"
SLOTS = "twopc.slotsPerPartition"
FULL_SWEEP = "twopc.fullSweepIntervalMs"
MARGIN = "twopc.commitMarginMs"
BUDGET = "twopc.taskBudgetMs"
STORAGE_OPTIONS = "twopc.storageOptions"
UNCONDITIONAL = "twopc.allowUnconditionalCreate"
RATE_LIMITED = "twopc.sourceRateLimited"
SOURCE_OFFSETS = "twopc.commitSourceOffsets"
REPAIR = "twopc.repairPolicy"
# "module:function" returning (token, expiry) for sasl.mechanism=OAUTHBEARER, on the driver and
# every executor (twopc/control/oauth.py); it travels in the producer config as
# twopc.oauth.token.provider, which librdkafka never sees.
OAUTH_TOKEN_PROVIDER = "twopc.oauthTokenProvider"
METRICS_PORT = "twopc.metricsPort"
JOB_LEASE = "twopc.jobLeaseMs"
TRIGGER = "twopc.triggerIntervalMs"
TOPIC = "topic"
SPARK_CHECKPOINT = "checkpointLocation"
# Spark adds this for every streaming sink; it is not ours to validate beyond reading it.
_SPARK_OWNED = ("path",)

DEFAULT_TIMEOUT_MS = 60_000
# How long a batch job's claim on its family's log lasts unless renewed (twopc/driver/lease.py).
DEFAULT_JOB_LEASE_MS = 30 * 60_000
# librdkafka refuses a transaction.timeout.ms below 1000; above a signed 32-bit int it would
# reach librdkafka (and the broker's InitProducerId) as a negative number.
MIN_TIMEOUT_MS = 1_000
MAX_TIMEOUT_MS = 2**31 - 1
# Each slot is a transactional id per Spark partition that the brokers keep state for, and each
# task scans its pool: a few are enough (docs/design.md section 5).
MAX_SLOTS = 1024
_INT_RE = re.compile(r"^[+-]?[0-9]+$")
# Namespaces whose near misses are refused (a misspelt twopc.* or kafka.* option would be ignored).
_NAMESPACES = ("twopc", "kafka")
_PREFIX_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
_TOPIC_RE = re.compile(r"^(?!\.{1,2}$)[A-Za-z0-9._-]{1,249}$")  # Kafka's own rule
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,200}$")

# Producer settings twopc must own: changing them would break the protocol.
_FORBIDDEN_KAFKA = {
    "transactional.id": f"twopc derives transactional ids from {PREFIX!r}; remove kafka.transactional.id",
    "enable.idempotence": "transactions need idempotence; remove kafka.enable.idempotence",
    "transaction.timeout.ms": f"set the transaction timeout with {TIMEOUT!r} instead",
    "isolation.level": "a sink has no isolation level; remove kafka.isolation.level",
    "key.serializer": "keys are written as bytes (string or binary columns); remove kafka.key.serializer",
    "value.serializer": "values are written as bytes; remove kafka.value.serializer",
}

_KNOWN = {
    name.lower(): name
    for name in (
        CHECKPOINT, PREFIX, TIMEOUT, JOB_ID, SLOTS, FULL_SWEEP, MARGIN, BUDGET, STORAGE_OPTIONS,
        UNCONDITIONAL, RATE_LIMITED, SOURCE_OFFSETS, REPAIR, OAUTH_TOKEN_PROVIDER, METRICS_PORT, JOB_LEASE,
        TRIGGER, TOPIC,
        SPARK_CHECKPOINT,
    )
}


@dataclass(frozen=True)
class SinkConfig:
    """Everything the executors and the driver need; pickles with the Spark writer."""

    producer_config: dict[str, str]
    checkpoint_url: str
    prefix: str
    topic: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    transaction_timeout_ms: int = DEFAULT_TIMEOUT_MS
    slots: int = DEFAULT_SLOTS
    # How often at most a commit lists the whole pool instead of describing its batch's ids.
    full_sweep_interval_ms: int = DEFAULT_FULL_SWEEP_INTERVAL_MS
    job_id: str | None = None
    margin_ms: int | None = None
    budget_ms: int | None = None
    allow_unconditional_create: bool = False
    source_rate_limited: bool = False
    spark_checkpoint: str | None = None
    # Consumer group that gets each micro-batch's source offsets in the batch's transactions.
    source_offsets_group: str | None = None
    # What repairs a batch whose decided transactions the broker aborted (protocol/copies.py).
    repair_policy: RepairPolicy = RepairPolicy.AUTO
    # Where TwopcProgressListener serves the metrics exporter in the driver (0: any free port).
    metrics_port: int | None = None
    # A batch job's lease on its family's log: how long it lasts unless renewed.
    job_lease_ms: int = DEFAULT_JOB_LEASE_MS
    # The query's processing-time trigger interval, as the user states it (a Python data source
    # cannot see the query's trigger): checked against the timeout at start (option_checks.py).
    trigger_interval_ms: int | None = None

    def __repr__(self) -> str:
        # kafka.sasl.password, ssl.key.password, OAuth client secrets, storage secrets: masked.
        return redacted_repr(self)

    def control_config(self) -> dict[str, str]:
        """The control client reads the same librdkafka-style keys (it ignores producer-only ones)."""
        return dict(self.producer_config)

    def with_job_id(self, job_id: str) -> SinkConfig:
        return replace(self, job_id=_check_job_id(job_id))


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int,
         maximum: int) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip()
    if not _INT_RE.match(text) or len(text) > 20:
        raise OptionError(f"option {name} must be an integer, got {str(raw)[:40]!r}")
    value = int(text)
    if value < minimum:
        raise OptionError(f"option {name} must be at least {minimum}, got {value}")
    if value > maximum:
        raise OptionError(f"option {name} must be at most {maximum}, got {value}")
    return value


def _check_timing(timeout: int, margin: int | None, budget: int | None) -> None:
    """The commit margin must leave time to write, the task budget time to commit."""
    if margin is not None and margin >= timeout:
        raise OptionError(
            f"option {MARGIN}={margin} must be below {TIMEOUT} ({timeout}): a transaction is "
            "committed only with more than the margin left before its timeout, so every batch "
            "would fail after writing; lower the margin or raise the timeout")
    if margin is None and timeout <= DEFAULT_MARGIN_MS:
        raise OptionError(
            f"option {TIMEOUT}={timeout} leaves no time above the default {MARGIN} of "
            f"{DEFAULT_MARGIN_MS} ms: every batch would fail after writing; set {MARGIN} below "
            f"{timeout} or raise the timeout")
    left = timeout - (DEFAULT_MARGIN_MS if margin is None else margin)
    if budget is not None and budget > left:
        raise OptionError(
            f"option {BUDGET}={budget} must be at most {TIMEOUT} - {MARGIN} = {left} ms: a task "
            "that writes longer leaves its transaction too little time to be committed; lower "
            "the budget")


def _check_checkpoint(checkpoint: str) -> None:
    """An absolute path or URL: a relative one resolves against each process's working
    directory, so the driver and the executors could read and write different logs."""
    scheme, sep, rest = checkpoint.partition("://")
    absolute = rest.startswith("/") if sep and scheme.lower() == "file" else \
        bool(sep) or checkpoint.startswith("/")
    if not absolute:
        raise OptionError(
            f"option {CHECKPOINT}={checkpoint!r} must be an absolute path or URL (/data/chk/q, "
            "file:///data/chk/q, s3://bucket/chk/q): a relative path resolves against each "
            "process's working directory, so the driver and the executors could use different "
            "logs")


def _near_miss(low: str) -> str | None:
    """The option `low` was probably meant to be, if it looks like a misspelt twopc or kafka
    option; None for options that are not ours (Spark's own, such as queryName)."""
    close = difflib.get_close_matches(low.strip(), list(_KNOWN), n=1, cutoff=0.85)
    if close:
        return _KNOWN[close[0]]
    namespace = re.split(r"[.]", low.strip(), maxsplit=1)[0]
    for ns in _NAMESPACES:
        if namespace != ns and (namespace.startswith(ns) or difflib.SequenceMatcher(
                None, namespace, ns).ratio() >= 0.75):
            rest = low.strip()[len(namespace):].lstrip("._-")
            guess = difflib.get_close_matches(f"{ns}.{rest}", list(_KNOWN), n=1, cutoff=0.6)
            return _KNOWN[guess[0]] if guess else f"{ns}.{rest}"
    return None


def _bool(options: Mapping[str, str], name: str) -> bool:
    raw = str(options.get(name.lower(), "false")).strip().lower()
    if raw not in ("true", "false"):
        raise OptionError(f"option {name} must be true or false, got {raw!r}")
    return raw == "true"


def _check_job_id(job_id: str) -> str:
    if not _JOB_ID_RE.match(job_id):
        raise OptionError(
            f"job id {job_id!r} must be 1-200 characters of letters, digits, '.', '_', ':' or '-'"
        )
    return job_id


def _storage_options(options: Mapping[str, str]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    raw = options.get(STORAGE_OPTIONS.lower())
    if raw is not None:
        try:
            parsed = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError as exc:
            raise OptionError(f"option {STORAGE_OPTIONS} must be a JSON object of fsspec storage "
                              f"options: {exc.msg} at character {exc.pos}") from None
        if not isinstance(parsed, dict):
            raise OptionError(f"option {STORAGE_OPTIONS} must be a JSON object of fsspec storage "
                              f"options, got a {type(parsed).__name__}")
        result.update(parsed)
    for key, value in options.items():
        if key.startswith(STORAGE_PREFIX):
            # The case of fsspec keys matters (e.g. s3fs `client_kwargs`), but Spark lower-cases
            # option keys; users who need mixed case use the JSON form.
            result[key[len(STORAGE_PREFIX):]] = value
    return result


def parse_options(options: Mapping[str, Any], *, streaming: bool) -> SinkConfig:
    """Check and type the options; every error names the option and what to change."""
    lowered: dict[str, Any] = {}
    for key, value in options.items():
        low = str(key).lower()
        if low in lowered:
            raise OptionError(f"option {key} is given twice (option names ignore case)")
        lowered[low] = value
    for low in lowered:
        if low.startswith((KAFKA_PREFIX, STORAGE_PREFIX)) or low in _KNOWN or low in _SPARK_OWNED:
            continue
        if low.startswith("twopc."):
            names = ", ".join(sorted(_KNOWN.values()))
            guess = difflib.get_close_matches(low, list(_KNOWN), n=1, cutoff=0.6)
            hint = f"did you mean {_KNOWN[guess[0]]}? " if guess else ""
            raise OptionError(f"unknown option {low!r}; {hint}twopc's options are: {names}")
        meant = _near_miss(low)
        if meant is not None:
            raise OptionError(f"unknown option {low!r}: did you mean {meant}? A misspelt option "
                              "would be ignored; use the exact name (twopc.* options are "
                              "twopc's, kafka.* options go to the producer)")
        # Other options (Spark's own, such as queryName) are not ours: leave them alone.

    producer = {k[len(KAFKA_PREFIX):]: str(v) for k, v in lowered.items() if k.startswith(KAFKA_PREFIX)}
    # Spark's format("kafka") options are the Java producer's: read them as librdkafka's.
    producer = librdkafka_settings(producer)
    for key, why in _FORBIDDEN_KAFKA.items():
        if key in producer:
            raise OptionError(f"option kafka.{key} is not allowed: {why}")
    provider = lowered.get(OAUTH_TOKEN_PROVIDER.lower())
    if provider is not None:
        from twopc.control.oauth import TOKEN_PROVIDER_KEY

        if str(producer.get("sasl.mechanism", producer.get("sasl.mechanisms", ""))).upper() \
                != "OAUTHBEARER":
            raise OptionError(f"option {OAUTH_TOKEN_PROVIDER} needs kafka.sasl.mechanism=OAUTHBEARER")
        producer[TOKEN_PROVIDER_KEY] = str(provider).strip()
    if "oauth_cb" in producer:
        raise OptionError(f"option kafka.oauth_cb cannot be a string: use {OAUTH_TOKEN_PROVIDER}="
                          "module:function")
    if not producer.get("bootstrap.servers"):
        raise OptionError("option kafka.bootstrap.servers is required (the Kafka cluster to write to)")

    checkpoint = str(lowered.get(CHECKPOINT.lower(), "")).strip()
    if not checkpoint:
        raise OptionError(
            f"option {CHECKPOINT} is required: a durable fsspec URL (file:///..., s3://...) where twopc "
            "keeps its commit log; it must outlive restarts and be readable from the executors"
        )
    _check_checkpoint(checkpoint)
    if checkpoint.startswith("memory://"):
        raise OptionError(
            f"option {CHECKPOINT}={checkpoint!r}: memory:// lives inside one process, but Spark's Python "
            "workers are other processes; use a file:// or object-store URL"
        )

    prefix = str(lowered.get(PREFIX.lower(), "")).strip()
    if not prefix:
        raise OptionError(
            f"option {PREFIX} is required: a name unique to this query or job and stable across its "
            "restarts; transactional ids are '<prefix>-<partition>-<slot>'"
        )
    if not _PREFIX_RE.match(prefix):
        raise OptionError(
            f"option {PREFIX}={prefix!r} must be 1-200 characters of letters, digits, '.', '_' or '-'"
        )

    topic = lowered.get(TOPIC)
    if topic is not None and not str(topic).strip():
        raise OptionError("option topic is empty: give a topic name or leave the option out")
    if topic is not None and not _TOPIC_RE.match(str(topic).strip()):
        raise OptionError(f"option topic={str(topic)[:60]!r} is not a Kafka topic name: give 1-249 "
                          "characters of letters, digits, '.', '_' or '-'")

    job_id = lowered.get(JOB_ID.lower())
    if streaming and job_id is not None:
        raise OptionError(
            f"option {JOB_ID} is for batch writes; a streaming query is identified by its Spark "
            "checkpoint, remove the option"
        )

    group = lowered.get(SOURCE_OFFSETS.lower())
    if group is not None:
        group = str(group).strip()
        if not group:
            raise OptionError(f"option {SOURCE_OFFSETS} is empty: give the consumer group id that "
                              "gets the source offsets, or leave the option out")
        if not streaming:
            raise OptionError(
                f"option {SOURCE_OFFSETS} is for streaming queries that read Spark's Kafka source "
                "(the offsets come from the query's offsets log); remove it from a batch write")

    try:
        policy = parse_policy(str(lowered.get(REPAIR.lower(), RepairPolicy.AUTO.value)))
    except ValueError as exc:
        raise OptionError(f"option {REPAIR}: {exc} (auto: copy the aborted records forward when "
                          "the log still holds them, else repair with the re-run)") from None

    metrics_port = _int(lowered, METRICS_PORT, None, 0, 65535)
    if metrics_port is not None and not streaming:
        raise OptionError(
            f"option {METRICS_PORT} is for streaming queries (TwopcProgressListener serves the "
            "metrics in the driver); remove it from a batch write and run `twopc metrics` beside "
            "the job instead")
    trigger = _int(lowered, TRIGGER, None, 1, MAX_TIMEOUT_MS)
    if trigger is not None and not streaming:
        raise OptionError(f"option {TRIGGER} is for streaming queries (the interval of their "
                          "processingTime trigger); remove it from a batch write")

    timeout = _int(lowered, TIMEOUT, DEFAULT_TIMEOUT_MS, MIN_TIMEOUT_MS, MAX_TIMEOUT_MS)
    assert timeout is not None
    slots = _int(lowered, SLOTS, DEFAULT_SLOTS, 2, MAX_SLOTS)
    assert slots is not None
    full_sweep = _int(lowered, FULL_SWEEP, DEFAULT_FULL_SWEEP_INTERVAL_MS, 0, MAX_TIMEOUT_MS)
    assert full_sweep is not None
    margin = _int(lowered, MARGIN, None, 0, MAX_TIMEOUT_MS)
    budget = _int(lowered, BUDGET, None, 1, MAX_TIMEOUT_MS)
    _check_timing(timeout, margin, budget)
    job_lease = _int(lowered, JOB_LEASE, DEFAULT_JOB_LEASE_MS, 1_000, MAX_TIMEOUT_MS)
    assert job_lease is not None
    return SinkConfig(
        producer_config=producer,
        checkpoint_url=checkpoint,
        prefix=prefix,
        topic=None if topic is None else str(topic).strip(),
        storage_options=_storage_options(lowered),
        transaction_timeout_ms=timeout,
        slots=slots,
        full_sweep_interval_ms=full_sweep,
        job_id=None if job_id is None else _check_job_id(str(job_id).strip()),
        margin_ms=margin,
        budget_ms=budget,
        allow_unconditional_create=_bool(lowered, UNCONDITIONAL),
        source_rate_limited=_bool(lowered, RATE_LIMITED),
        spark_checkpoint=lowered.get(SPARK_CHECKPOINT.lower()),
        source_offsets_group=group,
        repair_policy=policy,
        metrics_port=metrics_port,
        job_lease_ms=job_lease,
        trigger_interval_ms=trigger,
    )
