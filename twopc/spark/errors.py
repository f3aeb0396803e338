"""Errors of the Spark integration: each names the problem and what to change."""

from __future__ import annotations

from twopc.errors import TwopcError


class SparkSinkError(TwopcError):
    """Base of the errors the kafka2pc data source, the foreachBatch sink and the job function raise."""


class OptionError(SparkSinkError, ValueError):
    """An option is missing, unknown or malformed."""


class TriggerIntervalError(OptionError):
    """The query's trigger interval (twopc.triggerIntervalMs, or the trigger Spark runs the query
    with) is too long for the transaction timeout."""


class InputSchemaError(SparkSinkError, ValueError):
    """The DataFrame's columns do not fit the Kafka sink schema (value, key, topic, partition, headers)."""


class BadRowError(SparkSinkError, ValueError):
    """A row cannot be written (null value, no topic, ...): the task fails and nothing of the batch shows."""


class MissingQueryIdentity(SparkSinkError):
    """A streaming write without a Spark checkpoint location: twopc cannot tell one query from another."""


