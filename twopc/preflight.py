"""The preflight before a first run (`twopc check`), in the spirit of Kafka Connect's
`exactly.once.support=required`: ask the cluster, and say for each requirement OK, WARN or FAIL, with the fix.

Every item is asked of the cluster, never guessed from configuration: ACLs are tried (InitProducerId on a
probe transactional id of the prefix; the topic's authorized operations from Metadata).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource

from twopc.control import ControlClient, ControlError


class Status(str, Enum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"


@dataclass(frozen=True)
class CheckItem:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        d = asdict(self)
        d["status"] = self.status.value
        return d


def run_preflight(
    config: Mapping[str, Any], topic: str, prefix: str, transaction_timeout_ms: int
) -> list[CheckItem]:
    items: list[CheckItem] = []
    admin = AdminClient({**config, "log_level": 3})
    with ControlClient(config) as control:
        steps: list[tuple[str, Callable[[], list[CheckItem]]]] = [
            ("broker version", lambda: _broker_version(control)),
            ("transaction timeout", lambda: _timeouts(admin, transaction_timeout_ms)),
            ("topic", lambda: _topic(admin, topic)),
            ("transactional id ACLs", lambda: _transactional_id_acl(control, prefix)),
        ]
        for name, step in steps:
            try:
                items += step()
            except (ControlError, Exception) as exc:  # one failed probe must not hide the others
                items.append(CheckItem(name, Status.FAIL, f"could not check: {exc}",
                                       "check the connection settings and this principal's ACLs"))
    return items


def _broker_version(control: ControlClient) -> list[CheckItem]:
    hint = control.broker_version_hint()
    items = []
    if hint.supported:
        items.append(CheckItem("broker version", Status.OK, str(hint)))
    else:
        items.append(CheckItem(
            "broker version", Status.FAIL, str(hint),
            "upgrade to Apache Kafka 3.6 or newer: older brokers can be left with a hanging "
            "transaction by a late produce request (KIP-890)"))
    versions = control.api_versions()
    needed = {22: "InitProducerId", 26: "EndTxn", 65: "DescribeTransactions", 66: "ListTransactions"}
    missing = [name for key, name in needed.items() if key not in versions]
    items.append(CheckItem(
        "transaction APIs", Status.FAIL if missing else Status.OK,
        f"missing: {', '.join(missing)}" if missing else "InitProducerId, EndTxn, Describe/ListTransactions",
        "use a broker with transactions enabled (3.6+)" if missing else ""))
    if hint.two_phase_commit_offered:
        items.append(CheckItem("KIP-939", Status.OK,
                               "the broker offers 2PC participation; twopc does not need or use it"))
    return items


def _timeouts(admin: AdminClient, timeout_ms: int) -> list[CheckItem]:
    md = admin.list_topics(timeout=10)
    broker_id = sorted(md.brokers)[0]
    res = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
    configs = admin.describe_configs([res])[res].result(15)
    max_timeout = int(configs["transaction.max.timeout.ms"].value)
    if timeout_ms > max_timeout:
        return [CheckItem(
            "transaction timeout", Status.FAIL,
            f"planned transaction.timeout.ms {timeout_ms} > broker transaction.max.timeout.ms {max_timeout}",
            f"lower twopc.transactionTimeoutMs to at most {max_timeout}, or raise the brokers' "
            "transaction.max.timeout.ms")]
    status = Status.OK if timeout_ms >= 60000 else Status.WARN
    fix = "" if status is Status.OK else (
        "a transaction must outlive the batch's stage plus the commit (and the first batch after an "
        "outage carries the backlog): use at least 60000 and a rate-limited source")
    return [CheckItem("transaction timeout", status,
                      f"planned {timeout_ms} ms, broker allows up to {max_timeout} ms", fix)]


def _topic(admin: AdminClient, topic: str) -> list[CheckItem]:
    md = admin.list_topics(topic, timeout=10)
    tm = md.topics.get(topic)
    if tm is None or tm.error is not None:
        return [CheckItem("topic", Status.FAIL, f"topic {topic!r}: {tm.error if tm else 'not found'}",
                          "create the topic first (twopc does not auto-create topics)")]
    rf = min(len(p.replicas) for p in tm.partitions.values())
    items = [CheckItem("topic", Status.OK, f"{topic}: {len(tm.partitions)} partitions")]
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        min_isr = int(admin.describe_configs([res])[res].result(15)["min.insync.replicas"].value)
    except KafkaException as exc:  # DescribeConfigs on the topic is optional: say so, go on
        items.append(CheckItem(
            "durability", Status.WARN, f"replication {rf}, min.insync.replicas not readable: {exc}",
            "grant DescribeConfigs on the topic to see it here; use replication >= 3 and "
            "min.insync.replicas >= 2 in production"))
    else:
        items.append(_durability(rf, min_isr))
    items.append(_topic_acls(admin, topic))
    return items


def _durability(rf: int, min_isr: int) -> CheckItem:
    if rf >= 3 and min_isr >= 2:
        return CheckItem("durability", Status.OK, f"replication {rf}, min.insync.replicas {min_isr}")
    return CheckItem(
        "durability", Status.WARN, f"replication {rf}, min.insync.replicas {min_isr}",
        "a committed transaction is only as durable as its replicas: use replication >= 3 and "
        "min.insync.replicas >= 2 in production")


def _topic_acls(admin: AdminClient, topic: str) -> CheckItem:
    desc = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic]
    ops = {op.name for op in (desc.result(15).authorized_operations or [])}
    # READ: the writer's DescribeProducers after its flush, and recovery's log check (Fetch).
    lacking = [op for op in ("WRITE", "DESCRIBE", "READ") if op not in ops and "ALL" not in ops]
    if not lacking:
        return CheckItem("topic ACLs", Status.OK, f"authorized: {', '.join(sorted(ops))}")
    why = (" (READ: the writer asks the leaders what its transaction wrote there, and recovery "
           "reads the log)" if "READ" in lacking else "")
    return CheckItem("topic ACLs", Status.FAIL, f"authorized: {', '.join(sorted(ops)) or 'nothing'}",
                     f"grant {' and '.join(lacking)} on topic {topic} to this principal{why}")


def _transactional_id_acl(control: ControlClient, prefix: str) -> list[CheckItem]:
    # Tried, not guessed: InitProducerId needs WRITE on the transactional id (and IdempotentWrite on
    # old brokers); DescribeTransactions needs DESCRIBE. The probe id holds no transaction.
    probe = f"{prefix}-twopc-check"
    result = control.fence([probe])[probe]
    if not result.fenced:
        return [CheckItem(
            "transactional id ACLs", Status.FAIL, f"InitProducerId on {probe!r}: {result.error}",
            f"grant WRITE and DESCRIBE on transactional ids with prefix {prefix!r} (a PREFIXED ACL), "
            "and IdempotentWrite on the cluster where the broker needs it")]
    desc = control.describe_transactions([probe])[probe]
    if desc.error_code:
        return [CheckItem("transactional id ACLs", Status.FAIL,
                          f"DescribeTransactions on {probe!r}: error {desc.error_code}",
                          f"grant DESCRIBE on transactional ids with prefix {prefix!r}")]
    return [CheckItem("transactional id ACLs", Status.OK,
                      f"WRITE and DESCRIBE on {prefix!r}* (tried on {probe!r})")]
