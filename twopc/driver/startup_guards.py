"""Guard 1, at start: the brokers' version and the transaction timeout against their maximum
(docs/design.md section 4). Raises UnsupportedBroker with what to change. And the trigger interval
against the timeout (`trigger_interval_problem`, pure: the Spark side raises).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from twopc.control import ControlClient
from twopc.control.oauth import librdkafka_config
from twopc.errors import UnsupportedBroker

_log = logging.getLogger(__name__)


def check_broker(control: ControlClient) -> str:
    """Refuse brokers before 3.6 (hanging transactions, KIP-890); returns what was found."""
    hint = control.broker_version_hint()
    if not hint.supported:
        raise UnsupportedBroker(
            f"the cluster looks older than Apache Kafka 3.6 ({hint}); before 3.6 a late produce "
            "request can leave a transaction hanging (KIP-890): upgrade the brokers to 3.6 or newer")
    if hint.two_phase_commit_offered:
        _log.info("the cluster offers KIP-939 (InitProducerId v6); twopc does not use it: "
                  "librdkafka cannot send it")
    return str(hint)


def check_timeout(transaction_timeout_ms: int, broker_max_timeout_ms: int | None) -> None:
    """transaction.timeout.ms must fit within the broker's transaction.max.timeout.ms."""
    if transaction_timeout_ms < 1000:
        raise UnsupportedBroker(
            f"transaction.timeout.ms={transaction_timeout_ms} is below librdkafka's minimum of 1000")
    if broker_max_timeout_ms is not None and transaction_timeout_ms > broker_max_timeout_ms:
        raise UnsupportedBroker(
            f"transaction.timeout.ms={transaction_timeout_ms} is above the brokers' "
            f"transaction.max.timeout.ms={broker_max_timeout_ms}: every transaction would be "
            "refused. Lower transaction.timeout.ms or raise transaction.max.timeout.ms")


def broker_max_timeout_ms(config: Mapping[str, str]) -> int | None:
    """The brokers' transaction.max.timeout.ms, or None if it cannot be read (no DescribeConfigs
    permission, for instance): then only the producer's own refusal will tell."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    try:
        admin = AdminClient({k: v for k, v in librdkafka_config(config).items()
                             if not k.startswith("transaction")})
        brokers = admin.list_topics(timeout=10).brokers
        if not brokers:
            return None
        resource = ConfigResource(ResourceType.BROKER, str(min(brokers)))
        entries = admin.describe_configs([resource])[resource].result(15)
        entry = entries.get("transaction.max.timeout.ms")
        return int(entry.value) if entry is not None and entry.value is not None else None
    except Exception as exc:  # any failure only means "not readable": the check is best effort
        _log.warning("could not read transaction.max.timeout.ms: %s", exc)
        return None


def check_at_start(control: ControlClient, config: Mapping[str, str],
                   transaction_timeout_ms: int) -> str:
    """Guard 1 of docs/design.md section 4 (broker version, timeout within the broker's maximum)."""
    found = check_broker(control)
    check_timeout(transaction_timeout_ms, broker_max_timeout_ms(config))
    return found



# A micro-batch's transactions stay open from its tasks' start to its commit. A query that keeps up
# with its trigger spends up to the interval on a batch, so the interval may take at most this
# fraction of the timeout: a batch that fills its interval then commits at the age where the commit
# warns (observe.AGE_WARNING_RATIO), with the other half left for a slower one.
TRIGGER_FRACTION = 0.5


def max_trigger_interval_ms(transaction_timeout_ms: int, margin_ms: int) -> int:
    """The longest trigger interval a timeout allows: TRIGGER_FRACTION of it, and in any case
    less than what guard 3 leaves (the timeout less the commit margin)."""
    return max(0, min(int(transaction_timeout_ms * TRIGGER_FRACTION),
                      transaction_timeout_ms - margin_ms))


def trigger_interval_problem(trigger_ms: int, transaction_timeout_ms: int,
                             margin_ms: int) -> str | None:
    """Why a trigger interval is unsafe for the timeout, with the fix; None if it is safe."""
    limit = max_trigger_interval_ms(transaction_timeout_ms, margin_ms)
    if trigger_ms <= limit:
        return None
    needed = max(int(trigger_ms / TRIGGER_FRACTION), trigger_ms + margin_ms)
    return (
        f"a trigger interval of {trigger_ms} ms is more than {limit} ms, the most that a "
        f"transaction timeout of {transaction_timeout_ms} ms allows (half of it, and less than "
        f"the timeout minus the commit margin of {margin_ms} ms): a micro-batch's transactions "
        "stay open from its tasks' start to its commit, and a query that keeps up with its "
        "trigger spends up to the interval on a batch. Trigger more often (processingTime of at "
        f"most {limit} ms) or raise twopc.transactionTimeoutMs to at least {needed} ms (within the "
        "brokers' transaction.max.timeout.ms)")
