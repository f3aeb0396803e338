"""OAUTHBEARER start-up benchmark: what a writer task pays for its token, side by side in one run.

Run on its own: ``python benchmarks/bench_oauth.py [--rounds R] [--rows N,N...]``. It starts its own
Kafka broker (4.3.1) whose SASL listener validates JWTs (OAUTHBEARER, KIP-768) against the test
identity provider it serves in-process (twopc_testing.oauth: so it needs the test-only distribution,
installed by scripts/setup.sh).

Each round runs every mode in turn (alternating order), one `write_partition` each (producer
creation, init_transactions, produce, flush, identification), on one 4-partition topic, its rows
given as `Columns` blocks of 10,000 whose delivery costs `--upstream-ms` per block (Spark's upstream
work, which the writer overlaps with its start by reading rows ahead). The control client is shared
per mode, as a reused executor keeps one. Modes:

- ``PLAINTEXT (no OAuth)``: the same broker's PLAINTEXT listener, the reference;
- ``oidc (librdkafka's own)``: `sasl.oauthbearer.method=oidc` against the identity provider;
- ``provider, oauth_cb off-thread``: `twopc.oauth.token.provider` as shipped: confluent-kafka's
  `oauth_cb`, the producer built on the writer's start thread while rows are read ahead;
- ``provider, oauth_cb on caller``: the same `oauth_cb` with the producer built on the caller's
  thread, as the prototype did (forced by `build_off_thread` answering no).

confluent-kafka's constructor waits for an `oauth_cb`'s first token in whole seconds
(twopc/control/oauth.py, `librdkafka_oauth`): the provider modes show that cost.

Measured (2 cores shared with other jobs, load ~5; Kafka 4.3.1, confluent-kafka 2.16.1;
`--rounds 3`, median s per task, difference to PLAINTEXT):

    mode                            rows     median   vs no OAuth
    PLAINTEXT (no OAuth)               1      0.121     +0.000 s
    oidc (librdkafka's own)            1      0.129     +0.008 s
    provider, oauth_cb off-thread      1      1.103     +0.982 s
    provider, oauth_cb on caller       1      1.116     +0.995 s
    PLAINTEXT (no OAuth)          100000      1.113     +0.000 s
    oidc (librdkafka's own)       100000      1.044     -0.069 s
    provider, oauth_cb off-thread 100000      1.704     +0.590 s
    provider, oauth_cb on caller  100000      1.910     +0.797 s

A second run after the relay's removal (same command): one row +0.992 s off-thread and +1.027 s
on the caller; 100,000 rows +0.886 s and +1.117 s (PLAINTEXT's median 0.820 s that time).

(The first run measured a loopback token endpoint serving the provider's JWTs to librdkafka's
OIDC client, +0.048 s and -0.104 s; it was not kept: AWS MSK IAM tokens, the provider's main
use, are no JWTs, and client-credentials IdPs have `oidc`.)

Prints a table of median seconds per task and per row count; asserts nothing about timings.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from twopc_testing.oauth import PROVIDER, IdentityProvider
from twopc_testing.secured import oauth_config, start_oauth_kafka

from benchmarks.common import RESULTS_DIR, machine_info, write_results
from twopc.broker import DEFAULT_VARIANT, LocalKafka
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, EndTxnRequest
from twopc.executor.rows import Columns
from twopc.executor.writer import write_partition

PLAIN = "PLAINTEXT (no OAuth)"
OIDC = "oidc (librdkafka's own)"
OFF_THREAD = "provider, oauth_cb off-thread"
ON_CALLER = "provider, oauth_cb on caller"
MODES = (PLAIN, OIDC, OFF_THREAD, ON_CALLER)
BLOCK = 10_000


@dataclass(frozen=True)
class Result:
    mode: str
    rows: int
    seconds: list[float]

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)


@contextmanager
def _forced(mode: str) -> Iterator[None]:
    """ON_CALLER: the producer built on the caller's thread, as without build_off_thread."""
    with ExitStack() as stack:
        if mode == ON_CALLER:
            stack.enter_context(mock.patch("twopc.executor.writer.build_off_thread",
                                           lambda _config: False))
        yield


def _rows(count: int, upstream_s: float) -> Iterator[Columns]:
    values = [os.urandom(64) for _ in range(min(count, BLOCK))]
    left = count
    while left > 0:
        n = min(left, BLOCK)
        time.sleep(upstream_s)
        yield Columns(values[:n])
        left -= n


def configs(kafka: LocalKafka, idp: IdentityProvider) -> dict[str, dict[str, str]]:
    provider = oauth_config(kafka, **{"twopc.oauth.token.provider": PROVIDER,
                                      "sasl.oauthbearer.config": idp.provider_config()})
    return {
        PLAIN: {"bootstrap.servers": kafka.bootstrap_servers},
        OIDC: oauth_config(kafka, **{
            "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": idp.token_url,
            "sasl.oauthbearer.client.id": idp.client_id,
            "sasl.oauthbearer.client.secret": idp.client_secret}),
        OFF_THREAD: provider, ON_CALLER: provider,
    }


def _task(config: dict[str, str], topic: str, rows: int, upstream_s: float,
          control: ControlClient) -> float:
    began = time.perf_counter()
    result = write_partition(config, f"bench-oauth-{uuid.uuid4().hex[:8]}", _rows(rows, upstream_s),
                             batch="0", task_partition=0, attempt=0, default_topic=topic,
                             transaction_timeout_ms=60000, control=control)
    elapsed = time.perf_counter() - began
    h = result.handle
    assert h is not None and h.record_count == rows
    control.end_txns([EndTxnRequest(h.transactional_id, h.producer_id, h.epoch, True)])
    return elapsed


def run(kafka: LocalKafka, idp: IdentityProvider, rows: list[int], rounds: int,
        upstream_ms: float, modes: tuple[str, ...] = MODES) -> list[Result]:
    topic = KafkaUnderTest("bench-oauth", kafka.bootstrap_servers, local=kafka).create_topic(4)
    by_mode = configs(kafka, idp)
    times: dict[tuple[str, int], list[float]] = {(m, n): [] for m in modes for n in rows}
    upstream_s = upstream_ms / 1000
    clients: dict[str, Any] = {}
    try:
        for mode in modes:
            clients[mode] = ControlClient(by_mode[mode])
            with _forced(mode):  # warm-up: imports, connections, the first token; not measured
                _task(by_mode[mode], topic, 10, 0.0, clients[mode])
        for r in range(rounds):
            order = modes if r % 2 == 0 else tuple(reversed(modes))
            for n in rows:
                for mode in order:
                    with _forced(mode):
                        times[(mode, n)].append(
                            _task(by_mode[mode], topic, n, upstream_s, clients[mode]))
    finally:
        for client in clients.values():
            client.close()
    return [Result(m, n, secs) for (m, n), secs in times.items()]


def format_table(results: list[Result], upstream_ms: float) -> str:
    width = max(len(r.mode) for r in results)
    base = {r.rows: r.median_s for r in results if r.mode == PLAIN}
    lines = [f"{'mode':<{width}}  {'rows':>7}  {'median s':>9}  {'vs no OAuth':>11}  runs (s)"]
    for r in sorted(results, key=lambda r: (r.rows, MODES.index(r.mode))):
        extra = f"{r.median_s - base[r.rows]:+.3f} s" if r.rows in base else ""
        runs = " ".join(f"{s:.3f}" for s in r.seconds)
        lines.append(f"{r.mode:<{width}}  {r.rows:>7}  {r.median_s:>9.3f}  {extra:>11}  {runs}")
    lines.append(f"one write_partition per task; rows in Columns blocks of {BLOCK}, each delivered "
                 f"after {upstream_ms:g} ms of upstream work")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rows", default="1,100000", help="row counts per task, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--upstream-ms", type=float, default=50.0,
                    help="upstream work per block of 10,000 rows (default 50)")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = ap.parse_args(argv)
    rows = [int(n) for n in args.rows.split(",")]
    machine = machine_info()
    with IdentityProvider() as idp:
        kafka = start_oauth_kafka(DEFAULT_VARIANT, idp.jwks_url, issuer=idp.issuer,
                                  audience=idp.audience)
        try:
            results = run(kafka, idp, rows, args.rounds, args.upstream_ms)
        finally:
            kafka.stop()
    table = format_table(results, args.upstream_ms)
    print(table)
    payload = {
        "command": " ".join(["benchmarks/bench_oauth.py", *(argv or sys.argv[1:])]),
        "rows": rows, "rounds": args.rounds, "upstream_ms": args.upstream_ms,
        "broker": kafka.spec.kafka_version, "machine": machine, "load_after": os.getloadavg(),
        "modes": [{"mode": r.mode, "rows": r.rows, "seconds": r.seconds, "median_s": r.median_s}
                  for r in results],
        "table": table,
    }
    print(f"results: {write_results('oauth', payload, args.results_dir)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
