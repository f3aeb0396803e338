"""The metrics exporter: what pins each partition, and each batch's figures, for Prometheus.

    server = serve(Target({"bootstrap.servers": "b:9092"}, ("orders",), "s3://bucket/twopc/orders"),
                   port=9478)
    ...                      # GET http://host:9478/metrics
    server.stop()

Everything is read when Prometheus scrapes (at most once a second; concurrent scrapes share the
read): the topics' partitions, their high watermarks and last stable offsets, the open
transactions (DescribeProducers), whose ids (ListTransactions by producer id, DescribeTransactions)
and, with a checkpoint log, which batch names them (read with `read_view`: read-only, no append).
The log is read again at most every `log_interval_s` seconds, or sooner when a transaction of
its pool pins a partition and no record named it at the last read. Beside the log, the Spark
sink's journal (twopc/spark/journal.py) gives each batch's figures: commit latency, outcomes,
recoveries, counted from when the exporter starts.

`twopc metrics` serves it standalone; `twopc.metricsPort` starts it in a Spark driver
(twopc/spark/metrics.py). The values are computed in metric_values.py (pure); the text and the
HTTP server are prometheus_client's. Names and labels: docs/operations.md, *Metrics*.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from checkpoint import CheckpointError, Log, open_log
from checkpoint.redact import redact_text, redact_url
from twopc.control import ControlClient, ControlError, TransactionDescription
from twopc.errors import TwopcError
from twopc.log.session import LogView, read_view
from twopc.ops.metric_values import (
    BatchObservation,
    JournalFollow,
    LogIndex,
    PartitionHold,
    RecoveryObservation,
    Role,
    log_index,
    partition_families,
    partition_holds,
    pinning_producer_ids,
)
from twopc.protocol.log_records import Prepared

_log = logging.getLogger(__name__)

DEFAULT_PORT = 9478
# Commit latency: a commit is a few EndTxn round trips and log writes; a slow store or a settling
# recovery takes seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                   120.0)
# The exporter's control client answers within a scrape: it gives up sooner than the driver's
# (docs/control.md has the keys); the target's own settings win.
CLIENT_DEFAULTS = {"twopc.control.retry.timeout.ms": "5000",
                   "socket.connection.setup.timeout.ms": "5000", "socket.timeout.ms": "10000"}


@dataclass(frozen=True)
class Target:
    """What to watch: a cluster and topics, and optionally the checkpoint log that writes them."""

    client_config: Mapping[str, str]  # bootstrap.servers and the security settings (librdkafka keys)
    topics: tuple[str, ...] = ()  # empty: the topics the log's intents name
    checkpoint_url: str | None = None
    storage_options: Mapping[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (f"Target(topics={list(self.topics)}, checkpoint="
                f"{redact_url(self.checkpoint_url) if self.checkpoint_url else None})")


class SetupError(ValueError):
    """What the exporter cannot watch at all (no log at the URL, no topic): said at start."""


class TwopcCollector(Collector):
    """A prometheus_client collector that reads the cluster, the log and the journal on collect."""

    def __init__(self, target: Target, *, log_interval_s: float = 10.0,
                 min_interval_s: float = 1.0) -> None:
        self.target = target
        self.log_interval_s = log_interval_s
        self.min_interval_s = min_interval_s
        self._lock = threading.Lock()
        self._control: ControlClient | None = None
        self._log: Log | None = None
        self._journal: Any = None
        self._view: LogView | None = None
        self._index: LogIndex | None = None
        self._view_at = float("-inf")
        self._families: list[Metric] = []
        self._looked_at = float("-inf")
        self._cluster_up = 0
        self._checkpoint_up = 0
        self._duration = 0.0
        self._unreadable = 0
        self._problems: dict[str, str] = {}
        self._follow = JournalFollow(time.time_ns() // 1_000_000)
        self.batches = Counter("twopc_batches", "Driver calls per batch (commit, abort), by outcome.",
                               ["owner", "event", "outcome"], registry=None)
        self.latency = Histogram("twopc_commit_latency_seconds",
                                 "Duration of the driver's commit of a batch.", ["owner"],
                                 buckets=LATENCY_BUCKETS, registry=None)
        self.margin = Gauge("twopc_commit_oldest_transaction_age_ratio",
                            "At the last commit, age / timeout of its transaction closest to its "
                            "timeout: the guard margin (near 1 the next slow batch loses its "
                            "transactions).", ["owner"], registry=None)
        self.last_batch = Gauge("twopc_last_batch_timestamp_seconds",
                                "When the last commit or abort of a batch ended (journal).",
                                ["owner", "event"], registry=None)
        self.recoveries = Counter("twopc_recoveries",
                                  "Recoveries that acted (a crash or a failed batch came before), "
                                  "by the driver call that ran them.", ["owner", "where"],
                                  registry=None)
        self.recovered_batches = Counter("twopc_recovered_batches",
                                         "Batches whose open intent a recovery settled, by outcome.",
                                         ["owner", "outcome"], registry=None)
        self.recovery_transactions = Counter(
            "twopc_recovery_transactions", "Transactions a recovery acted on, by action.",
            ["owner", "action"], registry=None)
        self._own = [self.batches, self.latency, self.margin, self.last_batch, self.recoveries,
                     self.recovered_batches, self.recovery_transactions]

    # --- prometheus_client's side ---------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if time.monotonic() - self._looked_at >= self.min_interval_s:
                self._look(strict=False)
            families = list(self._families)
        yield from families
        for metric in self._own:
            yield from metric.collect()

    def check(self) -> None:
        """One look now that raises what it cannot read (for a command to refuse at start)."""
        with self._lock:
            self._look(strict=True)

    def close(self) -> None:
        with self._lock:
            if self._control is not None:
                self._control.close()
                self._control = None

    # --- what the journal says (also for a caller that reads it itself) -------------------

    def observe_batch(self, obs: BatchObservation) -> None:
        self.batches.labels(obs.owner, obs.event, obs.outcome).inc()
        self.last_batch.labels(obs.owner, obs.event).set(obs.at_ms / 1000)
        if obs.event == "commit":
            self.latency.labels(obs.owner).observe(obs.latency_s)
            if obs.oldest_txn_age_ratio is not None:
                self.margin.labels(obs.owner).set(obs.oldest_txn_age_ratio)

    def observe_recovery(self, obs: RecoveryObservation) -> None:
        self.recoveries.labels(obs.owner, obs.where).inc()
        for outcome in obs.batch_outcomes:
            self.recovered_batches.labels(obs.owner, outcome).inc()
        for action, count in obs.actions.items():
            self.recovery_transactions.labels(obs.owner, action).inc(count)

    # --- one look ---------------------------------------------------------------------------

    def _look(self, *, strict: bool) -> None:
        began = time.monotonic()
        holds: list[PartitionHold] = []
        if self.target.checkpoint_url is not None:
            self._checkpoint_up = int(self._guard("checkpoint", strict, self._read_log, False))
        holds_or_none = self._guard("cluster", strict, self._read_cluster, None)
        self._cluster_up = int(holds_or_none is not None)
        holds = holds_or_none or []
        unreadable = sorted(f"{h.topic}-{h.partition}: {h.error}" for h in holds if h.error)
        self._unreadable = len(unreadable)
        if unreadable and self._problems.get("partitions") != unreadable[0]:
            _log.warning("twopc metrics: %d partition(s) not read whole, e.g. %s (their pins or "
                         "holdback are left out)", len(unreadable), unreadable[0])
        self._problems["partitions"] = unreadable[0] if unreadable else ""
        self._duration = time.monotonic() - began
        self._looked_at = time.monotonic()
        self._families = [*partition_families(holds), *self._exporter_families()]

    def _guard(self, what: str, strict: bool, read: Any, failed: Any) -> Any:
        """`read()`, or `failed` with the error logged once (and raised when `strict`)."""
        try:
            result = read()
        except SetupError:
            if strict:
                raise
            result, error = failed, "set-up"
        except (ControlError, CheckpointError, TwopcError, OSError, ValueError) as exc:
            if strict:
                raise
            error = redact_text(f"{type(exc).__name__}: {exc}",
                                {**self.target.client_config, **self.target.storage_options})
            result = failed
        else:
            if self._problems.pop(what, None) is not None:
                _log.warning("twopc metrics: the %s can be read again", what)
            return result
        if self._problems.get(what) != error:
            _log.warning("twopc metrics: cannot read the %s: %s", what, error)
            self._problems[what] = error
        return result

    def _read_log(self, force: bool = False) -> bool:
        assert self.target.checkpoint_url is not None
        if not force and time.monotonic() - self._view_at < self.log_interval_s:
            return True
        if self._log is None:
            self._log = open_log(self.target.checkpoint_url, dict(self.target.storage_options),
                                 read_only=True)
        view = read_view(self._log)
        if view is None:
            raise SetupError(f"{redact_url(self.target.checkpoint_url)} holds no twopc log (no "
                             "binding): check the URL; a query that never committed a batch has "
                             "none yet")
        self._view, self._view_at = view, time.monotonic()
        self._index = log_index(view.owner, view.records, view.state)
        self._read_journal(view)
        return True

    def _read_journal(self, view: LogView) -> None:
        from twopc.spark.errors import JournalError
        from twopc.spark.journal import Journal

        assert self.target.checkpoint_url is not None
        if self._journal is None:
            self._journal = Journal(self.target.checkpoint_url, self.target.storage_options)
        owner = view.owner.owner_id
        follow = self._follow
        try:
            doc = self._journal.read_recovery()
            if doc is not None and doc.get("owner_id") == owner:
                self._observe(follow.take_recovery(owner, doc["recovery"], int(doc["at_ms"]),
                                                   in_entry=False))
            for batch in follow.batches_to_read(view.state):
                for event in ("commit", "abort"):
                    entry = self._journal.read_batch(batch, event)
                    if entry is None or entry.get("owner_id") != owner:
                        continue  # none, or left by another query on this checkpoint location
                    self._observe(follow.take_batch(batch, event, entry))
                    self._observe(follow.take_recovery(owner, entry.get("recovery"),
                                                       int(entry["at_ms"]), in_entry=True))
        except JournalError as exc:
            # The journal holds figures for people: a file twopc did not write costs its figures
            # only; the partitions' metrics go on.
            if self._problems.get("journal") != str(exc):
                _log.warning("twopc metrics: %s", exc)
                self._problems["journal"] = str(exc)

    def _observe(self, obs: BatchObservation | RecoveryObservation | None) -> None:
        if isinstance(obs, BatchObservation):
            self.observe_batch(obs)
        elif obs is not None:
            self.observe_recovery(obs)

    def _topics(self) -> list[str]:
        if self.target.topics:
            return list(self.target.topics)
        if self._view is None:
            return []
        return sorted({s.topic for _, rec in self._view.records if isinstance(rec, Prepared)
                       for h in rec.handles for s in h.spans})

    def _read_cluster(self) -> list[PartitionHold]:
        topics = self._topics()
        if not topics:
            if self.target.checkpoint_url is None:
                raise SetupError("no topic to watch: give one")
            return []  # the log names no topic yet: nothing to watch until a batch is recorded
        if self._control is None:
            self._control = ControlClient({**CLIENT_DEFAULTS, **self.target.client_config})
        control = self._control
        parts = [(t, p) for t, ps in sorted(control.topic_partitions(topics).items()) for p in ps]
        producers = control.describe_producers(parts)
        stable = control.last_stable_offsets(parts)
        high = control.high_watermarks(parts)
        pids = pinning_producer_ids(producers)
        listings = control.list_transactions(producer_ids=pids) if pids else []
        tids = sorted({t.transactional_id for t in listings})
        descriptions: dict[str, TransactionDescription] = \
            control.describe_transactions(tids) if tids else {}
        def holds() -> list[PartitionHold]:
            return partition_holds(parts, high, stable, producers, listings, descriptions,
                                   self._index, time.time_ns() // 1_000_000)

        found = holds()
        unnamed = any(h.pin is not None and h.pin.role is Role.POOL for h in found)
        # A transaction of the log's pool that no record named at the last read: the log may have
        # its intent since. Read it again (at most once a second).
        if unnamed and self.target.checkpoint_url is not None \
                and time.monotonic() - self._view_at >= self.min_interval_s \
                and self._guard("checkpoint", False, lambda: self._read_log(force=True), False):
            found = holds()
        return found

    def _exporter_families(self) -> list[Metric]:
        up = GaugeMetricFamily("twopc_exporter_cluster_up",
                               "1 if the last look at the cluster read every topic's partitions.")
        up.add_metric([], self._cluster_up)
        out: list[Metric] = [up]
        if self.target.checkpoint_url is not None:
            log_up = GaugeMetricFamily("twopc_exporter_checkpoint_up",
                                       "1 if the checkpoint log (and its owner) could be read.")
            log_up.add_metric([], self._checkpoint_up)
            out.append(log_up)
        unread = GaugeMetricFamily("twopc_exporter_unreadable_partitions",
                                   "Partitions whose offsets or producers the last look could not "
                                   "read (no leader, no READ on the topic): their holdback or pin "
                                   "is left out.")
        unread.add_metric([], self._unreadable)
        out.append(unread)
        took = GaugeMetricFamily("twopc_exporter_look_duration_seconds",
                                 "How long the last look at the cluster and the log took.")
        took.add_metric([], self._duration)
        out.append(took)
        return out


class MetricsServer:
    """prometheus_client's HTTP server (a daemon thread) over one collector."""

    def __init__(self, collector: TwopcCollector, port: int, address: str = "0.0.0.0") -> None:
        self.collector = collector
        self.registry = CollectorRegistry()
        self.registry.register(collector)
        self._server, self._thread = start_http_server(port, address, self.registry)
        self.address = address

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.address in ("0.0.0.0", "", "::") else self.address
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        self.collector.close()


def serve(target: Target, port: int = DEFAULT_PORT, address: str = "0.0.0.0",
          **collector_settings: Any) -> MetricsServer:
    """Start serving `target`'s metrics on `port` (0: any free port; `.port` tells which)."""
    return MetricsServer(TwopcCollector(target, **collector_settings), port, address)


def exposition(collector: TwopcCollector) -> str:
    """The metrics as Prometheus' text format, once (what a scrape would answer)."""
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()
