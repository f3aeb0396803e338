"""Errors of the Spark integration: each names the problem and what to change.

Design: docs/design.md section 7.
"""

from __future__ import annotations

from checkpoint.redact import redact_url
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




class JournalError(SparkSinkError, ValueError):
    """A file of the observe journal (`<twopc.checkpoint>/observe/`) is not what twopc writes there:
    it is a hint for people, never read by the protocol; the message names the file."""

    def __init__(self, path: str, reason: str) -> None:
        path = redact_url(path)
        self.path = path
        super().__init__(f"journal file {path} is unreadable ({reason}): it only holds figures "
                         "for people, nothing of the protocol; delete it (the next commit writes "
                         "it again) or ignore this")
