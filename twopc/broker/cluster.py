"""A real Apache Kafka cluster (one node or a few) on this machine, for the demo, tests and benchmarks.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import dataclasses
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType

from twopc.broker.artifacts import kafka_classpath
from twopc.broker.errors import BrokerStartError
from twopc.broker.node import Node, NodePorts
from twopc.broker.spec import BrokerSpec, OAuthListener
from twopc.broker.tls import TlsMaterial, make_tls_material

CONTROLLER_ID = 1000  # the dedicated controller of a multi-broker cluster
# How long a start or restart may take before it counts as failed: a liveness bound, generous
# because a JVM start on a shared, loaded machine has taken over 90 s.
START_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalKafka:
    """Runs `spec` from Maven Central's artifacts in KRaft mode.

    One broker is a combined broker+controller node. Several brokers get a dedicated controller, so
    that killing any broker (say, a transaction coordinator) leaves the quorum up.

    Every broker has a PLAINTEXT listener (`bootstrap_servers`, also between brokers); with
    `spec.sasl_users` or `spec.oauth` a SASL_PLAINTEXT one; with `spec.tls` an SSL listener that
    requires a client certificate and, with SASL too, a SASL_SSL listener. The TLS material is made at start
    (`tls`: the CA, the brokers' keystore, a client certificate; twopc/broker/tls.py).
    """

    def __init__(
        self,
        spec: BrokerSpec | None = None,
        *,
        data_dir: Path | None = None,
        port: int | None = None,
    ) -> None:
        self.spec = spec or BrokerSpec()
        self.spec.validate()
        self._owns_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="twopc-kafka-"))
        self.cluster_id = ""
        self.nodes: list[Node] = []
        self.startup_seconds: float | None = None
        self.tls: TlsMaterial | None = None
        self._first_port = port

    # --- addresses -------------------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{n.ports.client}" for n in self.brokers)

    @property
    def sasl_bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{n.ports.sasl}" for n in self.brokers if n.ports.sasl)

    @property
    def ssl_bootstrap_servers(self) -> str:
        """The SSL listeners (mutual TLS: `tls.client_config(mutual=True)`)."""
        return ",".join(f"127.0.0.1:{n.ports.ssl}" for n in self.brokers if n.ports.ssl)

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """The SASL_SSL listeners (server authentication: `tls.client_config()`)."""
        return ",".join(f"127.0.0.1:{n.ports.sasl_ssl}" for n in self.brokers if n.ports.sasl_ssl)

    @property
    def brokers(self) -> list[Node]:
        return [n for n in self.nodes if "broker" in n.roles]

    def broker(self, node_id: int) -> Node:
        for n in self.brokers:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no broker with node id {node_id}")

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self, timeout_s: float = START_TIMEOUT_S) -> LocalKafka:
        began = time.monotonic()
        try:
            classpath = kafka_classpath(self.spec.kafka_version)
            if self.spec.tls:
                self.tls = make_tls_material(self.data_dir / "tls")
            self._plan_nodes()
            self.cluster_id = str(_random_cluster_id())
            for node in self.nodes:
                node.write_config()
                node.format_storage(
                    classpath, self.cluster_id, self._feature_args(), self._scram_args()
                )
            for node in self.nodes:
                node.launch(classpath, self.spec.heap_mb)
            self.wait_ready(timeout_s)
        except BaseException:
            # A start that failed leaves nothing behind: no node running (one launched before a
            # later one failed would hold its ports), and no temporary data directory (the
            # error carries the log's tail). A directory the caller named keeps what is in it.
            self.kill()
            if self._owns_dir:
                shutil.rmtree(self.data_dir, ignore_errors=True)
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Return once every broker answers Metadata and sees all its peers."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout_s
        last_error = ""
        while time.monotonic() < deadline:
            dead = [n for n in self.nodes if not n.alive()]
            if dead:
                raise BrokerStartError(
                    f"Kafka node {dead[0].node_id} exited during start-up:\n{dead[0].log_tail()}"
                )
            if all(_port_open(n.ports.client) for n in self.brokers):
                try:
                    admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
                    md = admin.list_topics(timeout=2)
                    if len(md.brokers) >= len(self.brokers):
                        return
                    last_error = f"{len(md.brokers)} of {len(self.brokers)} brokers registered"
                except Exception as exc:  # the broker is still coming up; say why if it never does
                    last_error = str(exc)
            time.sleep(0.2)
        tails = "\n".join(n.log_tail() for n in self.nodes)
        raise BrokerStartError(f"Kafka did not answer in {timeout_s:.0f}s ({last_error}):\n{tails}")

    def kill(self, node_id: int | None = None) -> None:
        """SIGKILL one broker, or every node."""
        targets = [self.broker(node_id)] if node_id is not None else self.nodes
        for node in targets:
            node.kill()

    def restart(self, node_id: int | None = None, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start killed or stopped nodes again on their existing data (no re-format).

        With several brokers, return only once every partition is fully replicated again, as a
        rolling restart waits for no under-replicated partitions before it touches the next
        broker: otherwise the next kill could take a partition below min.insync.replicas, or
        its last in-sync replica."""
        began = time.monotonic()
        classpath = kafka_classpath(self.spec.kafka_version)
        targets = [self.broker(node_id)] if node_id is not None else self.nodes
        for node in targets:
            if not node.alive():
                node.launch(classpath, self.spec.heap_mb)
        self.wait_ready(timeout_s)
        if len(self.brokers) > 1:
            self.wait_fully_replicated(max(1.0, timeout_s - (time.monotonic() - began)))

    def under_replicated(self) -> list[str]:
        """Partitions (internal topics included) whose in-sync replicas are fewer than their
        replicas, or that have no leader, as `topic[partition] isr/replicas`."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 3})
        md = admin.list_topics(timeout=10)
        return [f"{t.topic}[{p.id}] isr {sorted(p.isrs)} of {sorted(p.replicas)}"
                for t in md.topics.values() for p in t.partitions.values()
                if p.leader < 0 or len(p.isrs) < len(p.replicas)]

    def wait_fully_replicated(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        lagging: list[str] = []
        while time.monotonic() < deadline:
            try:
                lagging = self.under_replicated()
            except Exception as exc:  # a broker is still coming up: ask again
                lagging = [str(exc)]
            if not lagging:
                return
            time.sleep(0.2)
        raise BrokerStartError(f"partitions still under-replicated after {timeout_s:.0f}s: "
                               f"{lagging[:5]}")

    def stop(self, remove_data: bool = True) -> None:
        # Brokers before the controller, so that their controlled shutdown has a quorum to talk to.
        for node in sorted(self.nodes, key=lambda n: "broker" not in n.roles):
            node.stop()
        if remove_data and self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        elif remove_data:
            for node in self.nodes:
                shutil.rmtree(node.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalKafka:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- configuration ---------------------------------------------------------------------------
    def _plan_nodes(self) -> None:
        n = self.spec.brokers
        first = self._first_port
        if n == 1:
            ports = self._broker_ports(first or free_port(), free_port())
            voters = f"1@127.0.0.1:{ports.controller}"
            self.nodes = [Node(1, "broker,controller", ports, self.data_dir / "node-1", {})]
        else:
            ctl = NodePorts(free_port(), free_port(), None)
            voters = f"{CONTROLLER_ID}@127.0.0.1:{ctl.controller}"
            self.nodes = [Node(CONTROLLER_ID, "controller", ctl, self.data_dir / "controller", {})]
            for i in range(1, n + 1):
                client = first + i - 1 if first and i == 1 else free_port()
                ports = self._broker_ports(client, None)
                self.nodes.append(Node(i, "broker", ports, self.data_dir / f"node-{i}", {}))
        for node in self.nodes:
            node.properties = self._properties(node, voters)
            node.system_properties = self._system_properties()

    def _broker_ports(self, client: int, controller: int | None) -> NodePorts:
        sasl, tls = self.spec.has_sasl, self.spec.tls
        return NodePorts(client, controller, free_port() if sasl else None,
                         ssl=free_port() if tls else None,
                         sasl_ssl=free_port() if sasl and tls else None)

    def _properties(self, node: Node, voters: str) -> dict[str, str]:
        rf = min(3, self.spec.brokers)
        p: dict[str, str] = {
            "process.roles": node.roles,
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(node.data_dir / "logs"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": str(rf),
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(max(1, rf - 1)),
            "transaction.state.log.num.partitions": "1" if rf == 1 else "3",
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": str(max(1, rf - 1)),
            "default.replication.factor": str(rf),
            "min.insync.replicas": "1",
            "group.initial.rebalance.delay.ms": "0",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(
                self.spec.abort_sweep_ms
            ),
            "delete.topic.enable": "true",
            # Kafka's broker session (9 s) is kept, though a broker restarted after SIGKILL is
            # refused registration until it expires (a restart takes 12.5 s; 5 s with a 3 s
            # session): the stranded-commit tests need the restarted coordinator to load its
            # PrepareCommit before that expiry fences the broker, and the shared test broker's
            # hundreds of partitions take longer than 3 s to recover (CI of 2026-11-28: no
            # commit stranded in 15 restarts, four tests failed).
            # The log cleaner allocates its dedupe buffer at start (Kafka's default: 128 MiB, one
            # array); under a small -Xmx that allocation alone ran the broker out of heap
            # (OutOfMemoryError in SkimpyOffsetMap, CI of 2026-11-27). The compacted topics of a
            # test broker are tiny: a sixteenth of the heap is plenty.
            "log.cleaner.dedupe.buffer.size": str(_dedupe_buffer_bytes(self.spec.heap_mb)),
        }
        listeners: list[str] = []
        protocols = {"CONTROLLER": "PLAINTEXT", "PLAINTEXT": "PLAINTEXT"}
        advertised: list[str] = []
        if "broker" in node.roles:
            listeners.append(f"PLAINTEXT://127.0.0.1:{node.ports.client}")
            advertised.append(f"PLAINTEXT://127.0.0.1:{node.ports.client}")
            p["inter.broker.listener.name"] = "PLAINTEXT"
        if node.ports.controller is not None:
            listeners.append(f"CONTROLLER://127.0.0.1:{node.ports.controller}")
        extra_listeners = (("SASL_PLAINTEXT", node.ports.sasl), ("SSL", node.ports.ssl),
                           ("SASL_SSL", node.ports.sasl_ssl))
        for name, port in extra_listeners:
            if port is None:
                continue
            listeners.append(f"{name}://127.0.0.1:{port}")
            advertised.append(f"{name}://127.0.0.1:{port}")
            protocols[name] = name
            if name.startswith("SASL_"):
                p.update(self._sasl_properties(name.lower()))
        if node.ports.ssl is not None or node.ports.sasl_ssl is not None:
            assert self.tls is not None
            p.update(self.tls.broker_properties())
            # The SSL listener authenticates clients by certificate (mutual TLS); SASL_SSL by
            # SASL, over a TLS session that authenticates only the broker.
            p["listener.name.ssl.ssl.client.auth"] = "required"
        p["listeners"] = ",".join(listeners)
        if advertised:
            p["advertised.listeners"] = ",".join(advertised)
        p["listener.security.protocol.map"] = ",".join(f"{k}:{v}" for k, v in protocols.items())
        p.update(self.spec.extra_properties)
        return p

    def _sasl_properties(self, listener: str) -> dict[str, str]:
        prefix = f"listener.name.{listener}"
        mechanisms: list[str] = []
        p: dict[str, str] = {}
        if self.spec.sasl_users:
            users = " ".join(f'user_{u}="{pw}"' for u, pw in self.spec.sasl_users.items())
            mechanisms += ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
            p.update({
                f"{prefix}.plain.sasl.jaas.config": (
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
                ),
                f"{prefix}.scram-sha-256.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                ),
                f"{prefix}.scram-sha-512.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                ),
            })
        oauth = self.spec.oauth
        if oauth is not None:
            mechanisms.append("OAUTHBEARER")
            if listener == "sasl_ssl" and oauth.unsecured_over_tls:
                oauth = dataclasses.replace(oauth, jwks_url=None)
            p.update(_oauth_properties(f"{prefix}.oauthbearer", oauth))
        p["sasl.enabled.mechanisms"] = ",".join(mechanisms)
        if listener == "sasl_plaintext" and self.spec.sasl_max_reauth_ms is not None:
            # Per mechanism (SaslChannelBuilder reads it with the listener and mechanism prefix).
            for mech in mechanisms:
                p[f"{prefix}.{mech.lower()}.connections.max.reauth.ms"] = \
                    str(self.spec.sasl_max_reauth_ms)
        return p

    def _system_properties(self) -> dict[str, str]:
        oauth = self.spec.oauth
        if oauth is None or oauth.jwks_url is None:
            return {}
        # Kafka 4.0+ fetches no OAuth URL that this allow-list (exact strings, comma-separated)
        # does not name: unset, it allows none. 3.9.1+ reads it too, but unset allows all.
        return {"org.apache.kafka.sasl.oauthbearer.allowed.urls": oauth.jwks_url}

    def _feature_args(self) -> list[str]:
        if self.spec.major < 4:
            return []
        return ["--feature", f"transaction.version={self.spec.effective_transaction_version()}"]

    def _scram_args(self) -> list[str]:
        # SCRAM credentials live in the cluster metadata: KRaft writes them at format time.
        args: list[str] = []
        for user, pw in self.spec.sasl_users.items():
            for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                args += ["--add-scram", f"{mech}=[name={user},password={pw}]"]
        return args


# The broker's side of OAUTHBEARER. The package without `.secured.` holds the validator in 3.4+
# (3.x keeps a deprecated copy under `.secured.`; 4.0 removed it), so one name serves 3.9 and 4.x.
OAUTH_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
OAUTH_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def _oauth_properties(prefix: str, oauth: OAuthListener) -> dict[str, str]:
    """`prefix` is `listener.name.<listener>.oauthbearer`: these apply to that listener's
    OAUTHBEARER only. A login module without options logs in without a token: the listener
    validates tokens and never presents one (the brokers talk to each other over PLAINTEXT)."""
    p = {f"{prefix}.sasl.jaas.config": f"{OAUTH_LOGIN_MODULE} required ;"}
    if oauth.jwks_url is not None:
        p[f"{prefix}.sasl.server.callback.handler.class"] = OAUTH_VALIDATOR
        p[f"{prefix}.sasl.oauthbearer.jwks.endpoint.url"] = oauth.jwks_url
        if oauth.audience is not None:
            p[f"{prefix}.sasl.oauthbearer.expected.audience"] = oauth.audience
        if oauth.issuer is not None:
            p[f"{prefix}.sasl.oauthbearer.expected.issuer"] = oauth.issuer
    # else: Kafka's default for OAUTHBEARER, OAuthBearerUnsecuredValidatorCallbackHandler
    # (unsigned tokens; `exp`, `iat` and `sub` checked).
    return p


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _random_cluster_id() -> str:
    # A KRaft cluster id is a base64url-encoded UUID without padding (what `random-uuid` prints).
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def java_version() -> str:
    proc = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    return (proc.stderr or proc.stdout).splitlines()[0] if proc.returncode == 0 else "unknown"


def _dedupe_buffer_bytes(heap_mb: int) -> int:
    return max(4, heap_mb // 16) * 1024 * 1024

