"""Errors of the embedded broker harness.

Design: docs/design.md section 7.
"""


class BrokerError(Exception):
    """Base class of the harness's errors."""


class BrokerSetupError(BrokerError):
    """The broker's artifacts or Java could not be prepared."""


class BrokerStartError(BrokerError):
    """A broker process did not come up; the message carries the tail of its log."""
