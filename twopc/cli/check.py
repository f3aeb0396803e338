"""`twopc check`: a preflight before the first run.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import argparse
from typing import Any

from twopc.cli._common import add_client_settings, client_settings, integer
from twopc.cli._output import emit_json
from twopc.ops.preflight import CONNECTION, Status, run_preflight

EPILOG = """Each item is OK, WARN or FAIL, with what to change. The ACLs are tried: InitProducerId on the
probe id PREFIX-twopc-check (it holds no transaction), and the topic's authorized operations. The
producer's acks is what librdkafka accepts for the writer's producer (-X settings included); the
in-sync replicas are each partition's live ones (Metadata), of the topic and of __transaction_state.
If no broker can be reached (address, TLS, SASL), the only item is `connection`, saying why.

exit codes: 0 no FAIL (WARNs allowed); 1 at least one FAIL; 2 bad arguments, or the cluster
unreachable (the `connection` item).

example:
  twopc check --bootstrap-servers 127.0.0.1:9092 --topic events --prefix orders-job
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "check", help="preflight: broker version, timeouts, topic durability, ACLs",
        description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--prefix", required=True, help="the transactional id prefix the job will use")
    p.add_argument("--transaction-timeout-ms", default=60000,
                   type=integer(1000, 2**31 - 1, "milliseconds"))
    add_client_settings(
        p, "extra librdkafka settings (security.protocol=SASL_SSL, sasl.username=..., ...)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    config = {"bootstrap.servers": args.bootstrap_servers,
              **client_settings(args)}
    items = run_preflight(config, args.topic, args.prefix, args.transaction_timeout_ms)
    failed = any(i.status is Status.FAIL for i in items)
    unreachable = any(i.name == CONNECTION and i.status is Status.FAIL for i in items)
    if args.json:
        emit_json({"passed": not failed, "items": [i.as_dict() for i in items]})
    else:
        for i in items:
            print(f"{i.status.value:<4}  {i.name}: {i.detail}")
            if i.fix:
                print(f"      fix: {i.fix}")
    return 2 if unreachable else 1 if failed else 0
