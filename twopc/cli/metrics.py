"""`twopc metrics`: a Prometheus exporter of what holds read_committed consumers back, standalone.

Read-only: it asks the brokers Metadata, ListOffsets, DescribeProducers, ListTransactions and
DescribeTransactions, and reads the checkpoint log and its journal by key (no probe, no append).

Design: docs/design.md section 7.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from checkpoint import CheckpointError
from checkpoint.redact import redact_text
from twopc.cli._common import (
    add_checkpoint_args,
    bootstrap_servers,
    client_settings,
    integer,
    number,
    storage_options,
)
from twopc.cli._output import fail
from twopc.control import ControlError
from twopc.errors import TwopcError
from twopc.ops.metrics import DEFAULT_PORT, MetricsServer, SetupError, Target, TwopcCollector, exposition

EPILOG = f"""Serves http://ADDRESS:PORT/metrics (Prometheus text format; default port {DEFAULT_PORT}) until
SIGTERM or Ctrl-C; the URL is the last line on stdout (metrics=URL). Each scrape reads, per
partition of the topics: the high watermark, the last stable offset and their difference (the
LSO holdback), the open transaction that pins it (producer id, epoch, transactional id, state,
age against its timeout) and, with --checkpoint, the batch and the query or job of the log that
names it; and, from the Spark sink's journal beside the log, each batch's commit latency and
outcome and the recoveries that acted since the exporter started. Metric names, labels and an
example Grafana dashboard: docs/operations.md (Metrics).

exit codes: 0 stopped by SIGTERM (or --once printed the metrics); 2 bad arguments, the cluster or
the checkpoint log unreachable at start, a topic that does not exist, the port in use; 130 Ctrl-C.
Once serving, what cannot be read is reported as twopc_exporter_cluster_up 0 (or
twopc_exporter_checkpoint_up 0), never by stopping.

examples:
  twopc metrics --bootstrap-servers kafka-1:9092 --topic orders
  twopc metrics --bootstrap-servers kafka-1:9093 --topic orders --checkpoint s3://bucket/twopc/orders \\
      --command-config client.properties --port 9478
  twopc metrics --bootstrap-servers kafka-1:9092 --topic orders --once    # print once, exit
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "metrics", help="Prometheus exporter: LSO holdback per partition, the transaction pinning "
        "it, and the batches' figures (read-only)",
        description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT[,...]",
                   type=bootstrap_servers)
    p.add_argument("--topic", dest="topics", action="append", default=[], metavar="TOPIC",
                   help="a topic to watch (repeatable); with --checkpoint and no --topic, the "
                   "topics the log's batches wrote")
    add_checkpoint_args(p, required=False, help_text="the twopc checkpoint log that writes the "
                        "topics (any fsspec URL or a local path): names the batch and owner of "
                        "each pinning transaction, and gives the batches' figures")
    p.add_argument("--port", type=integer(0, 65535, "a port"), default=DEFAULT_PORT,
                   help=f"the port to serve on (default {DEFAULT_PORT}; 0: any free port)")
    p.add_argument("--address", default="0.0.0.0",
                   help="the address to listen on (default 0.0.0.0: every interface)")
    p.add_argument("--log-interval", type=number(0.0, 86400.0, "seconds"), default=10.0,
                   metavar="SECONDS", help="read the checkpoint log at most this often (default "
                   "10; sooner when a transaction of its pool pins a partition unnamed)")
    p.add_argument("--once", action="store_true",
                   help="print the metrics once (what a scrape answers) and exit")
    p.set_defaults(handler=_metrics)


def _metrics(args: argparse.Namespace) -> int:
    if not args.topics and not args.checkpoint:
        return fail("give --topic (or --checkpoint, whose log names the topics)")
    settings = {**client_settings(args), "bootstrap.servers": args.bootstrap_servers}
    target = Target(settings, tuple(dict.fromkeys(args.topics)), args.checkpoint,
                    storage_options(args))
    collector = TwopcCollector(target, log_interval_s=args.log_interval)
    try:
        try:
            collector.check()
        except SetupError as exc:
            return fail(str(exc))
        except (CheckpointError, TwopcError) as exc:
            return fail(f"cannot read the checkpoint log: {exc}")
        except (ControlError, OSError) as exc:
            return fail(f"cannot ask the cluster: {redact_text(str(exc), settings)}")
        if args.once:
            sys.stdout.write(exposition(collector))
            return 0
        return _serve(collector, args.port, args.address)
    finally:
        collector.close()


def _serve(collector: TwopcCollector, port: int, address: str) -> int:
    try:
        server = MetricsServer(collector, port, address)
    except OSError as exc:
        return fail(f"cannot listen on {address}:{port}: {exc}")
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        print(f"serving twopc metrics on {address}:{server.port} (GET /metrics); SIGTERM or "
              "Ctrl-C stops", file=sys.stderr)
        print(f"metrics={server.url}", flush=True)
        while not stop.wait(1.0):
            pass
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.stop()
