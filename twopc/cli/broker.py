"""`twopc broker start|stop|list`: a real single-node Kafka broker on this machine, for demos and tests.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

from twopc.broker import BrokerError, BrokerSpec, LocalKafka
from twopc.broker.artifacts import cache_root
from twopc.broker.node import wait_for_exit
from twopc.broker.spec import DEFAULT_KAFKA_VERSION
from twopc.cli._common import integer
from twopc.cli._output import emit_json, fail

EPILOG = f"""examples:
  twopc broker start                       # Kafka {DEFAULT_KAFKA_VERSION}, transaction version 2, port 9092
  twopc broker start --port 19092 --kafka-version 3.9.2
  twopc broker stop --port 19092
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "broker",
        help="run a local Apache Kafka broker (KRaft, from Maven Central)",
        description="Run a real single-node Apache Kafka broker in KRaft mode on 127.0.0.1. The "
        "jars are fetched once with Maven into ~/.cache/twopc (TWOPC_CACHE_DIR overrides).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    start = actions.add_parser(
        "start",
        help="start a broker; prints bootstrap.servers=HOST:PORT last",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    start.add_argument("--port", type=integer(1, 65535, "a port"), default=9092,
                       help="client port (default 9092)")
    start.add_argument(
        "--kafka-version",
        default=DEFAULT_KAFKA_VERSION,
        help=f"Apache Kafka release (default {DEFAULT_KAFKA_VERSION}; 3.9.x also tested)",
    )
    start.add_argument(
        "--transaction-version",
        type=int,
        choices=(0, 2),
        default=None,
        help="KIP-890 transaction protocol: 2 (default on 4.x) or 0 (old; only one on 3.x)",
    )
    start.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the broker keeps its logs (default: a new temporary directory)",
    )
    start.add_argument("--heap-mb", type=integer(64, 1 << 20, "MiB"), default=512,
                       help="JVM heap in MiB (default 512)")
    start.set_defaults(handler=_start)

    stop = actions.add_parser("stop", help="stop the broker on a port and remove its data")
    stop.add_argument("--port", type=integer(1, 65535, "a port"), default=9092)
    stop.set_defaults(handler=_stop)

    ls = actions.add_parser("list", help="brokers started with `twopc broker start`")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(handler=_list)


def _registry() -> Path:
    path = cache_root() / "brokers"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _start(args: argparse.Namespace) -> int:
    state_file = _registry() / f"{args.port}.json"
    if _port_in_use(args.port):
        return fail(
            f"port {args.port} is already in use; pick another with --port, or "
            f"`twopc broker stop --port {args.port}` if it is a twopc broker"
        )
    if args.data_dir is not None and args.data_dir.exists() and any(args.data_dir.iterdir()):
        return fail(f"--data-dir {args.data_dir} is not empty; give an empty or new directory")
    spec = BrokerSpec(
        kafka_version=args.kafka_version,
        transaction_version=args.transaction_version,
        heap_mb=args.heap_mb,
    )
    try:
        kafka = LocalKafka(spec, data_dir=args.data_dir, port=args.port)
        kafka.start()
    except BrokerError as exc:
        return fail(str(exc), 1)
    node = kafka.nodes[0]
    state_file.write_text(
        json.dumps(
            {
                "pid": node.pid,
                "port": args.port,
                "data_dir": str(kafka.data_dir),
                "kafka_version": spec.kafka_version,
                "transaction_version": spec.effective_transaction_version(),
            }
        )
    )
    print(
        f"Apache Kafka {spec.kafka_version} (transaction version "
        f"{spec.effective_transaction_version()}) started in {kafka.startup_seconds:.1f}s, "
        f"pid {node.pid}, data in {kafka.data_dir}"
    )
    print(f"bootstrap.servers={kafka.bootstrap_servers}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    state_file = _registry() / f"{args.port}.json"
    if not state_file.exists():
        return fail(f"no broker started by `twopc broker start` on port {args.port}", 1)
    state = json.loads(state_file.read_text())
    pid = int(state["pid"])
    if _is_our_broker(pid, state["data_dir"]):
        for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            if wait_for_exit(pid, wait_s):
                break
        what = f"stopped the broker on port {args.port}"
    else:
        # The broker died or the machine restarted since: its pid may now be another process's,
        # which a signal to its group would kill.
        what = (f"the broker on port {args.port} was no longer running (pid {pid} is not it); "
                "nothing was signalled")
    shutil.rmtree(state["data_dir"], ignore_errors=True)
    state_file.unlink()
    print(f"{what}; removed {state['data_dir']}")
    return 0


def _is_our_broker(pid: int, data_dir: str) -> bool:
    """Whether `pid` is still the broker `twopc broker start` recorded: a Kafka JVM whose
    command line names a configuration file in its data directory."""
    try:
        args = subprocess.run(["ps", "-ww", "-p", str(pid), "-o", "args="], capture_output=True,
                              text=True, check=False, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "kafka.Kafka" in args and data_dir in args


def _list(args: argparse.Namespace) -> int:
    states = [json.loads(p.read_text()) for p in sorted(_registry().glob("*.json"))]
    if args.json:
        emit_json(states)
    else:
        for s in states:
            print(
                f"port {s['port']}: Kafka {s['kafka_version']} TV{s['transaction_version']} "
                f"pid {s['pid']} data {s['data_dir']}"
            )
    return 0


def _port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0
