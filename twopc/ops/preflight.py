"""The preflight before a first run (`twopc check`), in the spirit of Kafka Connect's
`exactly.once.support=required`: ask the cluster, and say for each requirement OK, WARN or FAIL, with the fix.

Every item is asked of the cluster, never guessed from configuration: ACLs are tried (InitProducerId on a
probe transactional id of the prefix; the topic's authorized operations from Metadata); the producer's
acks is what librdkafka accepts for the producer the writer makes; the in-sync replicas are the live ones
of each partition (Metadata), not only the topic's settings. The decisions on what was found are pure
functions (`producer_acks`, `in_sync_replicas`, `kip939`).

Design: docs/design.md section 7.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from confluent_kafka import KafkaException, Producer, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource

from twopc.control import (
    AuthenticationError,
    BrokerConnectionError,
    ConfigError,
    ControlClient,
    ControlError,
    TlsError,
)
from twopc.control.oauth import OAuthTokenError, librdkafka_config

CONNECTION = "connection"
TRANSACTION_LOG = "__transaction_state"


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
    """Every item; or, if the cluster cannot be reached at all (a wrong CA, wrong credentials, no
    broker at the address), only the `connection` item saying why and what to change."""
    items: list[CheckItem] = []
    try:
        control = ControlClient(config)
    except ConfigError as exc:  # a setting twopc's control client refuses (GSSAPI, HOST, port)
        return [CheckItem(CONNECTION, Status.FAIL, str(exc), "fix the setting it names "
                          "(--bootstrap-servers, -X or --command-config)")]
    try:
        admin = AdminClient({**librdkafka_config(config), "log_level": 3})
    except OAuthTokenError as exc:  # the token provider failed, or its token has expired
        control.close()
        return [_oauth_failure(exc)]
    except (KafkaException, ValueError, TypeError) as exc:  # librdkafka refuses a setting
        control.close()
        return [CheckItem(CONNECTION, Status.FAIL, f"librdkafka refuses the client settings: "
                          f"{_kafka_text(exc)}", "fix or remove the -X setting it names "
                          "(librdkafka's names: docs.confluent.io, CONFIGURATION.md)")]
    with control:
        unreachable = _connection(control)
        if unreachable is not None:
            return [unreachable]
        steps: list[tuple[str, Callable[[], list[CheckItem]]]] = [
            ("broker version", lambda: _broker_version(control)),
            ("producer acks", lambda: [_producer_acks(config, prefix, transaction_timeout_ms)]),
            ("transaction timeout", lambda: _timeouts(admin, transaction_timeout_ms)),
            ("topic", lambda: _topic(admin, topic)),
            ("transactional id ACLs", lambda: _transactional_id_acl(control, prefix)),
            # After the probe above: it creates the transaction log on a new cluster.
            ("transaction log replicas", lambda: [_transaction_log(admin)]),
        ]
        for name, step in steps:
            try:
                items += step()
            except (ControlError, Exception) as exc:  # one failed probe must not hide the others
                items.append(CheckItem(name, Status.FAIL, f"could not check: {exc}",
                                       "check the connection settings and this principal's ACLs"))
    return items


def _kafka_text(exc: BaseException) -> str:
    """The message of a confluent-kafka error (its KafkaError's str), else the exception's."""
    err = exc.args[0] if exc.args else None
    text = getattr(err, "str", None)
    return str(text()) if callable(text) else str(exc)


def _oauth_failure(exc: OAuthTokenError) -> CheckItem:
    return CheckItem(CONNECTION, Status.FAIL, str(exc),
                     f"fix the OAUTHBEARER token source {exc.setting} (-X or --command-config), "
                     "or the brokers' expected audience and issuer")


def _connection(control: ControlClient) -> CheckItem | None:
    """None once a broker answered ApiVersions; else why not, and what to change."""
    try:
        control.api_versions()
    except TlsError as exc:
        return CheckItem(CONNECTION, Status.FAIL, str(exc), exc.advice)
    except OAuthTokenError as exc:
        return _oauth_failure(exc)
    except AuthenticationError as exc:
        return CheckItem(CONNECTION, Status.FAIL, str(exc),
                         "check sasl.mechanism, sasl.username and sasl.password (-X)")
    except ConfigError as exc:
        return CheckItem(CONNECTION, Status.FAIL, str(exc), "fix the -X setting it names")
    except BrokerConnectionError as exc:
        return CheckItem(CONNECTION, Status.FAIL, str(exc),
                         "check --bootstrap-servers and security.protocol: the address and "
                         "protocol of a listener of the brokers")
    return None


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
    items.append(kip939(versions.get(22, (0, -1))[1]))
    return items


def kip939(init_producer_id_max_version: int) -> CheckItem:
    """What the brokers say of KIP-939 (2PC participation: InitProducerId v6). twopc neither needs
    nor uses it (librdkafka cannot send it), so it is OK either way; the item says which it is."""
    top = init_producer_id_max_version
    if top >= 6:
        return CheckItem("KIP-939", Status.OK,
                         f"offered: the brokers accept InitProducerId up to v{top} (2PC "
                         "participation); twopc does not use it (librdkafka cannot send it): it "
                         "ends pre-committed transactions with EndTxn from its own log")
    return CheckItem("KIP-939", Status.OK,
                     f"not offered: the brokers accept InitProducerId up to v{top}, not v6 (2PC "
                     "participation; Apache Kafka up to 4.3.1 keeps it behind "
                     "unstable.api.versions.enable); twopc does not need it")


_ACKS_KEYS = ("acks", "request.required.acks")


def producer_acks(config: Mapping[str, Any]) -> CheckItem:
    """The acks the writer's producer runs with. Its producer is transactional, hence idempotent,
    and librdkafka then requires acks=all: a committed record is on every in-sync replica (at
    least min.insync.replicas of them) before the commit. Anything else is refused at start."""
    given = {k: str(config[k]) for k in _ACKS_KEYS if k in config}
    bad = {k: v for k, v in given.items() if v.strip().lower() not in ("all", "-1")}
    if bad:
        key, value = next(iter(bad.items()))
        return CheckItem(
            "producer acks", Status.FAIL,
            f"{key}={value} given: the transactional (so idempotent) producer twopc runs needs "
            "acks=all, and librdkafka refuses to start it otherwise",
            f"remove {key} from the producer settings (or set it to all)")
    how = "as given" if given else "librdkafka's default, and required by idempotence"
    return CheckItem("producer acks", Status.OK,
                     f"acks=all ({how}): a record counts as written once every in-sync replica "
                     "has it")


def _producer_acks(config: Mapping[str, Any], prefix: str, timeout_ms: int) -> CheckItem:
    """producer_acks, confirmed by librdkafka itself: the writer's producer is made (not used)."""
    from twopc.executor.producer import transactional_producer_config
    from twopc.executor.write_errors import WriterConfigError

    item = producer_acks(config)
    if item.status is Status.FAIL:
        return item
    try:
        Producer({**transactional_producer_config(config, f"{prefix}-twopc-check", timeout_ms),
                  "log_level": 3})
    except (KafkaException, WriterConfigError) as exc:
        return CheckItem("producer acks", Status.FAIL,
                         f"librdkafka refuses the writer's producer: "
                         f"{exc.args[0] if exc.args else exc}",
                         "fix the producer setting it names")
    return item


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
        items.append(in_sync_replicas(
            "in-sync replicas", topic,
            [(p.id, p.leader, len(p.replicas), len(p.isrs)) for p in tm.partitions.values()],
            min_isr))
    items.append(_topic_acls(admin, topic))
    return items


def in_sync_replicas(name: str, topic: str, partitions: Sequence[tuple[int, int, int, int]],
                     min_isr: int) -> CheckItem:
    """The live replication of `topic`'s partitions, each `(partition, leader, replicas, in-sync
    replicas)` as Metadata says now, against min.insync.replicas. A partition below it refuses
    acks=all writes (NOT_ENOUGH_REPLICAS): twopc's tasks there fail and nothing commits; one with
    fewer in-sync replicas than replicas is one broker failure nearer to that."""
    offline = sorted(p for p, leader, _, _ in partitions if leader < 0)
    below = sorted((p, isr) for p, leader, _, isr in partitions if leader >= 0 and isr < min_isr)
    lagging = sorted((p, isr, rf) for p, leader, rf, isr in partitions
                     if leader >= 0 and min_isr <= isr < rf)
    if offline or below:
        parts = [f"{topic}[{p}] has no leader" for p in offline] + [
            f"{topic}[{p}] has {isr} in-sync replica(s)" for p, isr in below]
        return CheckItem(
            name, Status.FAIL, f"{'; '.join(parts[:8])} (min.insync.replicas {min_isr})",
            "bring the missing brokers back (or reassign the partitions): until then writes with "
            "acks=all to these partitions fail (NOT_ENOUGH_REPLICAS), so twopc's tasks there fail "
            "and commit nothing")
    if lagging:
        parts = [f"{topic}[{p}] {isr} of {rf}" for p, isr, rf in lagging]
        return CheckItem(
            name, Status.WARN, f"under-replicated: {'; '.join(parts[:8])} in sync "
            f"(min.insync.replicas {min_isr})",
            "bring the lagging or stopped brokers back before any maintenance: fewer than "
            f"{min_isr} in-sync replicas stops every write to the partition")
    counts = sorted({isr for _, _, _, isr in partitions})
    return CheckItem(name, Status.OK,
                     f"{len(partitions)} partitions, every replica in sync ({'/'.join(map(str, counts))}"
                     f" in-sync replicas, min.insync.replicas {min_isr})")


def _transaction_log(admin: AdminClient) -> CheckItem:
    """The coordinators' own log: a partition of it below its min ISR stops every transaction whose
    id hashes there."""
    name = "transaction log replicas"
    md = admin.list_topics(TRANSACTION_LOG, timeout=10)
    tm = md.topics.get(TRANSACTION_LOG)
    if tm is None or tm.error is not None:
        return CheckItem(name, Status.WARN,
                         f"{TRANSACTION_LOG} not readable: {tm.error if tm else 'not found'}",
                         f"grant DESCRIBE on topic {TRANSACTION_LOG} to see it here")
    res = ConfigResource(ConfigResource.Type.BROKER, str(sorted(md.brokers)[0]))
    try:
        configs = admin.describe_configs([res])[res].result(15)
    except KafkaException as exc:
        return CheckItem(name, Status.WARN,
                         f"transaction.state.log.min.isr not readable: {exc}",
                         "grant DescribeConfigs on the cluster to see it here")
    min_isr = int(configs["transaction.state.log.min.isr"].value)
    return in_sync_replicas(name, TRANSACTION_LOG, [
        (p.id, p.leader, len(p.replicas), len(p.isrs)) for p in tm.partitions.values()], min_isr)


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
