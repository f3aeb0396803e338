"""`twopc log dump`: print the records of a twopc checkpoint log, as stored, for an operator.

Read-only (no probe, no append; a local directory that does not exist is reported, not created).
Each record is shown with its number, kind and body; a record this twopc cannot read (a corrupt
file, a field of the wrong type, an unknown kind) is shown with why, and the dump goes on where
the log allows it: the record that InconsistentLog or RecordCorrupt names can be looked at here.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from checkpoint import CheckpointError, Log, LogNotFound, open_log
from checkpoint.redact import redact_url
from twopc.cli._common import integer, key_value, storage_options
from twopc.cli._output import emit_json, fail
from twopc.log.session import BINDING_KEY
from twopc.protocol.log_records import RecordFormatError, binding_from_body, from_body

EPILOG = """Shows the log's binding (from its index), its low-water mark, then every record kept, oldest
first: number, kind and body (the stored msgpack map, as JSON; bytes as their repr). A record twopc
cannot read is marked UNREADABLE with the reason; a file that cannot be read at all stops the dump
there, naming it (records are read by number: nothing after a missing or corrupt one is guessed).

exit codes: 0 every record read; 1 some record unreadable (shown); 2 bad arguments, no log at
the URL, storage unreachable.

examples:
  twopc log dump --checkpoint /data/chk/orders-twopc
  twopc log dump --checkpoint s3://bucket/chk/orders-twopc --from 120 --limit 20 --json
"""


def register(sub: Any) -> None:
    p = sub.add_parser("log", help="inspect a twopc checkpoint log (read-only)",
                       description="Inspect a twopc checkpoint log (read-only).")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    d = actions.add_parser("dump", help="print the log's records as stored",
                           description=__doc__, epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("--checkpoint", required=True, metavar="URL",
                   help="the twopc checkpoint log (any fsspec URL or a local path)")
    d.add_argument("--storage-option", dest="storage", action="append", default=[],
                   type=key_value, metavar="KEY=VALUE", help="fsspec storage option (repeatable)")
    d.add_argument("--from", dest="start", type=integer(0, 2**63 - 1, "a record number"),
                   default=None, metavar="SEQ", help="first record to show (default: the mark)")
    d.add_argument("--limit", type=integer(1, 10**9, "a number of records"), default=None,
                   help="show at most this many records")
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.set_defaults(handler=_dump)


def _plain(value: Any) -> Any:
    """A msgpack value as JSON can hold it (bytes and other types as their repr)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else repr(value)
    return repr(value)


def _binding(log: Log) -> tuple[dict[str, Any] | None, str | None]:
    try:
        body = log.index.get(BINDING_KEY)
    except CheckpointError as exc:
        return None, str(exc)
    if body is None:
        return None, "no binding: no twopc query or job has bound this log"
    try:
        b = binding_from_body(body)
    except RecordFormatError as exc:
        return _plain(body), f"unreadable binding: {exc}"
    return {"owner_kind": b.kind.value, "owner_id": b.owner_id, "prefix": b.prefix}, None


def dump(log: Log, start: int | None, limit: int | None) -> dict[str, Any]:
    """The dump as data: binding, mark, records (each `seq`, `kind`, `body`, `error`), and the
    error that stopped the read, if one did."""
    binding, binding_error = _binding(log)
    out: dict[str, Any] = {"checkpoint": redact_url(log.url), "binding": binding,
                           "binding_error": binding_error, "low_water_mark": None,
                           "records": [], "error": None}
    try:
        mark = log.low_water_mark()
        out["low_water_mark"] = mark
        records = log.records() if start is None or start <= mark else log.since(start - 1)
        for rec in records:
            if limit is not None and len(out["records"]) >= limit:
                break
            row: dict[str, Any] = {"seq": rec.seq, "kind": _plain(rec.body.get("kind")),
                                   "body": _plain(rec.body), "error": None}
            try:
                from_body(rec.body)
            except RecordFormatError as exc:
                row["error"] = str(exc)
            out["records"].append(row)
    except CheckpointError as exc:
        out["error"] = str(exc)
    return out


def _dump(args: argparse.Namespace) -> int:
    try:
        log = open_log(args.checkpoint, storage_options(args), read_only=True)
        result = dump(log, args.start, args.limit)
    except LogNotFound as exc:
        return fail(str(exc))
    except CheckpointError as exc:
        return fail(f"cannot read the checkpoint log: {exc}")
    if result["binding"] is None and result["low_water_mark"] is None and result["error"]:
        return fail(f"cannot read the checkpoint log: {result['error']}")
    if args.json:
        emit_json(result)
    else:
        _print(result)
    bad = result["error"] or result["binding_error"] or any(r["error"] for r in result["records"])
    return 1 if bad else 0


def _print(r: dict[str, Any]) -> None:
    b = r["binding"]
    print(f"checkpoint {r['checkpoint']}")
    if r["binding_error"]:
        print(f"binding: {r['binding_error']}")
    elif b is not None:
        print(f"binding: {b['owner_kind']} {b['owner_id']!r}, prefix {b['prefix']!r}")
    print(f"low-water mark: {r['low_water_mark']}")
    for row in r["records"]:
        body = json.dumps(row["body"], sort_keys=True, separators=(",", ":"))
        print(f"{row['seq']:>8}  {row['kind']!s:<12} {body}")
        if row["error"]:
            print(f"{'':>8}  UNREADABLE: {row['error']}")
    if r["error"]:
        print(f"stopped: {r['error']}")
    print(f"{len(r['records'])} record(s)")
