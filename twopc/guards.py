"""Guards against the timeout-versus-commit data loss (DESIGN.md section 4, guards 1 and 3).

The check before the intent is pure (handles, the coordinator's answers, a clock reading); the
start-time checks ask the cluster and raise UnsupportedBroker with what to change.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from twopc.control import ControlClient, TransactionDescription, TxnState
from twopc.errors import UnsupportedBroker
from twopc.handle import Handle

_log = logging.getLogger(__name__)


def coordinator_now(handles: Sequence[Handle], now_ms: int) -> tuple[int, int]:
    """(an estimate of the coordinators' clock now, the skew it adds) from the driver's clock.

    Evidence only ever moves the estimate later (less time left):
    - a writer's clock read after its transaction started cannot be in the future, so a writer clock
      ahead of the driver's shows the driver's clock is behind;
    - a coordinator start time after the writer's reading shows the coordinator's clock is ahead of
      the writer's by at least the difference.
    What no evidence shows (a coordinator ahead by less than the writing took) the margin covers.
    """
    if not handles:
        return now_ms, 0
    driver_behind = max(0, max(h.writer_clock_ms for h in handles) - now_ms)
    coordinator_ahead = max(0, max(h.start_ms - h.writer_clock_ms for h in handles))
    skew = driver_behind + coordinator_ahead
    return now_ms + skew, skew


def check_before_intent(handles: Sequence[Handle],
                        described: Mapping[str, TransactionDescription],
                        now_ms: int, margin_ms: int) -> dict[str, str]:
    """Reasons, per transactional id, why a handle must not be committed (empty: all may)."""
    coord_now, skew = coordinator_now(handles, now_ms)
    failed: dict[str, str] = {}
    for h in handles:
        d = described.get(h.transactional_id)
        if d is None or d.state is TxnState.UNKNOWN_ID:
            failed[h.transactional_id] = "the coordinator does not know the transactional id"
        elif not d.holds(h.producer_id, h.epoch):
            failed[h.transactional_id] = (
                f"held by producer id {d.producer_id} epoch {d.producer_epoch} ({d.state.value}), "
                f"not the recorded {h.producer_id}/{h.epoch}: another process used the id "
                "(a zombie attempt) or the coordinator aborted it")
        elif d.state is not TxnState.ONGOING:
            failed[h.transactional_id] = f"state {d.state.value}, not Ongoing"
        else:
            start = d.start_ms if d.start_ms > 0 else h.start_ms
            timeout = d.timeout_ms if d.timeout_ms > 0 else h.timeout_ms
            left = start + timeout - coord_now
            if left <= margin_ms:
                failed[h.transactional_id] = (
                    f"{left} ms left before transaction.timeout.ms ({timeout} ms) runs out, not "
                    f"above the margin of {margin_ms} ms (estimated clock skew {skew} ms)")
    return failed


# ---- at start ------------------------------------------------------------------------------------


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
        admin = AdminClient({k: v for k, v in config.items() if not k.startswith("transaction")})
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
    """Guard 1 of DESIGN.md section 4 (broker version, timeout within the broker's maximum)."""
    found = check_broker(control)
    check_timeout(transaction_timeout_ms, broker_max_timeout_ms(config))
    return found
