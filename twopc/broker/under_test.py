"""Which Kafka the tests, benchmarks and demo talk to: the embedded broker by default, or another.

- default: a real Apache Kafka broker run from Maven Central's artifacts (`twopc.broker.LocalKafka`);
- `TWOPC_BOOTSTRAP_SERVERS=host:port`: an existing cluster (its variant is then "external", and the
  tests that must SIGKILL the broker cannot run against it; they say so);
- `TWOPC_BROKER=testcontainers`: testcontainers' Kafka container, where a Docker engine is reachable.

A replicated variant (`kafka4-3node`) is several brokers: `kill(node_id)` and `restart(node_id)` act
on one of them, and `victim()` names the broker that holds a role for the query (the transaction
coordinator of its ids, or a partition leader), found the way clients find it (FindCoordinator,
Metadata).

Design: docs/design.md section 7.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from twopc.broker import DEFAULT_VARIANT, MATRIX_VARIANTS, VARIANTS, LocalKafka

if TYPE_CHECKING:
    from twopc.control import ControlClient

EXTERNAL = "external"


@dataclass
class KafkaUnderTest:
    """A running Kafka the tests use, with the means to crash and restart it when it is ours."""

    variant: str
    bootstrap_servers: str
    local: LocalKafka | None = None
    container: Any = None
    startup_seconds: float | None = None
    _topics: list[str] = field(default_factory=list)

    @property
    def can_kill(self) -> bool:
        return self.local is not None

    @property
    def replicated(self) -> bool:
        """Several brokers: a fault kills one of them (`victim`), not the whole cluster."""
        return self.local is not None and len(self.local.brokers) > 1

    @property
    def transaction_version(self) -> int | None:
        return self.local.spec.effective_transaction_version() if self.local else None

    def config(self, **extra: str) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap_servers, **extra}

    def kill(self, node_id: int | None = None) -> None:
        if self.local is None:
            raise RuntimeError(f"cannot SIGKILL the {self.variant} Kafka: it is not ours")
        self.local.kill(node_id)

    def restart(self, node_id: int | None = None) -> None:
        if self.local is None:
            raise RuntimeError(f"cannot restart the {self.variant} Kafka: it is not ours")
        self.local.restart(node_id)

    def victim(self, control: ControlClient, role: str, transactional_ids: Sequence[str] = (),
               partitions: Sequence[tuple[str, int]] = ()) -> int | None:
        """The broker to kill for a fault on `role`: `coordinator` (the transaction coordinator of
        most of `transactional_ids`) or `leader` (the leader of the first of `partitions`). None on
        a single broker: a fault kills all of it."""
        if not self.replicated:
            return None
        if role == "coordinator":
            if not transactional_ids:
                raise ValueError("victim('coordinator') needs transactional ids")
            found = Counter(control.coordinators(list(transactional_ids)).values())
            return found.most_common(1)[0][0]
        if role == "leader":
            if not partitions:
                raise ValueError("victim('leader') needs partitions")
            leader = control.leaders([partitions[0]])[partitions[0]]
            if leader < 0:
                raise RuntimeError(f"partition {partitions[0]} has no leader now")
            return leader
        raise ValueError(f"role must be coordinator or leader, not {role!r}")

    def create_topic(
        self, partitions: int = 4, config: dict[str, str] | None = None, name: str | None = None
    ) -> str:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        name = name or f"t-{uuid.uuid4().hex[:12]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        rf = min(3, len(self.local.brokers)) if self.local else -1
        futures = admin.create_topics(
            [NewTopic(name, partitions, replication_factor=rf, config=config or {})],
            operation_timeout=30,
        )
        futures[name].result(60)
        self._topics.append(name)
        # CreateTopics answers once the controller has committed the topic; a broker's metadata
        # can still lag it (a 3-node cluster under load answered a Metadata request right after
        # with no partitions): return once the topic is seen with a leader for every partition.
        deadline = time.monotonic() + 30
        while True:
            try:
                topic = admin.list_topics(name, timeout=10).topics.get(name)
            except KafkaException:  # a broker still coming up: ask again until the deadline
                topic = None
            if (topic is not None and topic.error is None and len(topic.partitions) == partitions
                    and all(p.leader >= 0 for p in topic.partitions.values())):
                return name
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name} created, but its {partitions} partitions have "
                                   f"no leader in the metadata after 30 s: {topic}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.local is not None:
            self.local.stop()
        if self.container is not None:
            self.container.stop()


def requested_variants(all_variants: bool) -> list[str]:
    """The variants to run: TWOPC_BROKER_VARIANTS (comma list or `all`) or the default one."""
    if os.environ.get("TWOPC_BOOTSTRAP_SERVERS"):
        return [EXTERNAL]
    if os.environ.get("TWOPC_BROKER") == "testcontainers":
        return ["testcontainers"]
    raw = os.environ.get("TWOPC_BROKER_VARIANTS", "")
    if raw == "all" or (all_variants and not raw):
        return list(MATRIX_VARIANTS)
    names = [v.strip() for v in raw.split(",") if v.strip()] or [DEFAULT_VARIANT]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        raise ValueError(f"unknown broker variants {unknown}; known: {sorted(VARIANTS)}")
    return names


def start_kafka(variant: str) -> KafkaUnderTest:
    if variant == EXTERNAL:
        return KafkaUnderTest(EXTERNAL, os.environ["TWOPC_BOOTSTRAP_SERVERS"])
    if variant == "testcontainers":
        from testcontainers.kafka import KafkaContainer

        container = KafkaContainer().with_kraft()
        container.start()
        return KafkaUnderTest(variant, container.get_bootstrap_server(), container=container)
    local = LocalKafka(VARIANTS[variant]).start()
    return KafkaUnderTest(
        variant, local.bootstrap_servers, local=local, startup_seconds=local.startup_seconds
    )


def variant_ids(variants: Sequence[str]) -> list[str]:
    return list(variants)
