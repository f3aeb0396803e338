"""`twopc verify`: the exactly-once audit of a topic, for users' own pipelines.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import KafkaException

from twopc.cli._common import (
    add_client_settings,
    bootstrap_servers,
    client_settings,
    integer,
    number,
)
from twopc.cli._output import emit_json, fail
from twopc.ops.audit import IdOf, audit_topic, id_from_header, id_from_key, id_from_value

EPILOG = """Reads TOPIC from the start to its last stable offset as a read_committed consumer, counts each
record's id, and checks that no partition's last stable offset lags its high watermark (an open
transaction holding consumers back).

exit codes: 0 the audit passed; 1 it failed (duplicates, missing ids, records without an id, or an open
transaction); 2 bad arguments or Kafka unreachable.

examples:
  twopc verify --bootstrap-servers 127.0.0.1:9092 --topic events
  twopc verify --bootstrap-servers B --topic events --id header:event-id --expect 1000000 --json
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "verify", help="audit a topic: every id exactly once, none missing, no open transaction",
        description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--bootstrap-servers", required=True, type=bootstrap_servers)
    p.add_argument("--topic", required=True)
    p.add_argument("--id", default="value", metavar="value|key|header:NAME",
                   help="where each record's unique id is (default: the whole value)")
    p.add_argument("--expect", type=integer(0, 10**9, "a number of ids"), default=None,
                   help="the number of distinct ids expected (with --id-format, the ids themselves)")
    p.add_argument("--id-format", default=None, metavar="FMT",
                   help="with --expect N: ids are FMT.format(i) for i in range(N), e.g. 'r-{}'")
    p.add_argument("--timeout", type=number(0.001, 7 * 86400.0, "seconds"), default=300.0,
                   help="seconds to read the topic (default 300)")
    p.add_argument("--settle", type=number(0.0, 86400.0, "seconds"), default=30.0,
                   metavar="SECONDS",
                   help="first wait up to this long for open transactions to end: commit markers "
                        "are written just after a commit returns (default 30; 0: as it is now)")
    add_client_settings(p, "extra librdkafka consumer settings (security.protocol=SSL, ...)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_verify)


def _id_extractor(spec: str) -> IdOf:
    if spec == "value":
        return id_from_value
    if spec == "key":
        return id_from_key
    if spec.startswith("header:") and len(spec) > len("header:"):
        return id_from_header(spec[len("header:"):])
    raise ValueError(f"--id must be value, key or header:NAME, not {spec!r}")


# --id-format builds every expected id in memory.
MAX_FORMATTED_IDS = 10**8


def _id_format_problem(fmt: str, expect: int | None) -> str | None:
    """Why `fmt` cannot name the expected ids (None if it can): it must take the id's index as
    its one positional field, e.g. 'r-{}' or 'r-{:06d}', and go with --expect N."""
    if expect is None:
        return f"--id-format {fmt!r} needs --expect N (the ids are FMT.format(i) for i < N)"
    if expect > MAX_FORMATTED_IDS:
        return (f"--expect {expect} with --id-format: at most {MAX_FORMATTED_IDS} ids are built "
                "in memory; leave --id-format out to check the count only")
    try:
        first, second = fmt.format(0), fmt.format(1)
    except (IndexError, KeyError, ValueError, TypeError, AttributeError) as exc:
        return (f"--id-format {fmt!r} is not a format of the id's index ({type(exc).__name__}: "
                f"{exc}): use one positional field, e.g. 'r-{{}}' or 'r-{{:06d}}'")
    if first == second:
        return (f"--id-format {fmt!r} gives the same id for every index: use one positional "
                "field, e.g. 'r-{}'")
    return None


def _verify(args: argparse.Namespace) -> int:
    try:
        id_of = _id_extractor(args.id)
    except ValueError as exc:
        return fail(str(exc))
    config = {"bootstrap.servers": args.bootstrap_servers, **client_settings(args)}
    expected = None
    if args.id_format is not None:
        problem = _id_format_problem(args.id_format, args.expect)
        if problem:
            return fail(problem)
        assert args.expect is not None
        expected = [args.id_format.format(i) for i in range(args.expect)]
    try:
        report = audit_topic(config, args.topic, expected_ids=expected, id_of=id_of,
                             timeout_s=args.timeout, settle_s=args.settle)
    except (KafkaException, TimeoutError) as exc:
        return fail(f"could not read {args.topic}: {exc}")
    count_mismatch = (
        args.expect is not None and expected is None and report.unique != args.expect
    )
    if args.json:
        emit_json({**report.as_dict(), "expected": args.expect,
                   "expected_count_mismatch": count_mismatch})
    else:
        print(report.summary())
        for rid, n in sorted(report.duplicates.items())[:20]:
            print(f"  duplicate: {rid} x{n}")
        for rid in report.missing[:20]:
            print(f"  missing: {rid}")
        for lag in report.lagging:
            print(f"  open transaction: partition {lag.partition}: last stable offset "
                  f"{lag.last_stable_offset} < high watermark {lag.high_watermark}")
        if count_mismatch:
            print(f"  expected {args.expect} distinct ids, found {report.unique}")
    return 0 if report.passed and not count_mismatch else 1
