"""What several commands share: their common arguments, parsed in one place, and the log view and
stuck batches that `status` and `recover` both show.

A malformed KEY=VALUE is refused by argparse itself (exit code 2, the usage line and the argument
named), before a command opens a log or a connection.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any

from checkpoint import Log
from checkpoint.redact import is_secret_key, redact_url
from twopc.log.session import LogView, read_view
from twopc.protocol.handle import Handle
from twopc.protocol.log_records import Aborted
from twopc.protocol.plans import plan_repair
from twopc.protocol.state import BatchState, BatchStatus


class UsageError(ValueError):
    """A bad argument or a URL that holds no twopc log: exit code 2."""


# ---- arguments --------------------------------------------------------------------------------


def key_value(item: str) -> tuple[str, str]:
    """argparse type of a KEY=VALUE argument."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{item!r} is not KEY=VALUE")
    return key.strip(), value


def integer(lo: int, hi: int, what: str = "") -> Callable[[str], int]:
    """argparse type of an integer from `lo` to `hi`: the error names the range."""
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(
                f"{value} is out of range: give {what or 'a number'} from {lo} to {hi}")
        return value

    return parse


def number(lo: float, hi: float, what: str = "") -> Callable[[str], float]:
    """argparse type of a finite number from `lo` to `hi` (nan and inf are refused)."""
    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(
                f"{text!r} is out of range: give {what or 'a number'} from {lo:g} to {hi:g}")
        return value

    return parse


# Environment variables a secret setting can come from, so that it is not on the command line
# (visible in `ps` and the shell's history): the --command-config file is the other way.
SECRET_ENV = {"sasl.password": "TWOPC_SASL_PASSWORD", "ssl.key.password": "TWOPC_SSL_KEY_PASSWORD"}


def properties_file(path: str) -> list[tuple[str, str]]:
    """argparse type of --command-config: a Java-style properties file of client settings
    (KEY=VALUE lines, `#` or `!` comments), as Kafka's tools take with --command-config."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {exc}") from None
    out: list[tuple[str, str]] = []
    for number_, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text[0] in "#!":
            continue
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(
                f"{path}, line {number_}: not KEY=VALUE (the value is not shown)")
        out.append((key.strip(), value.strip()))
    return out


def add_client_settings(p: argparse.ArgumentParser, help_text: str, *flags: str) -> None:
    """-X KEY=VALUE (repeatable): librdkafka-style client settings, in `args.extra`; and
    --command-config FILE, the same settings from a properties file (secrets belong there, or in
    TWOPC_SASL_PASSWORD / TWOPC_SSL_KEY_PASSWORD, not on the command line)."""
    p.add_argument(*(flags or ("-X",)), dest="extra", action="append", default=[],
                   type=key_value, metavar="KEY=VALUE", help=help_text)
    p.add_argument("--command-config", dest="command_config", type=properties_file,
                   default=[], metavar="FILE",
                   help="client settings from a properties file (KEY=VALUE lines), e.g. "
                   "sasl.password: keeps secrets out of `ps` and the shell history; -X overrides "
                   "it. sasl.password and ssl.key.password may also come from the environment "
                   "variables TWOPC_SASL_PASSWORD and TWOPC_SSL_KEY_PASSWORD")


def client_settings(args: argparse.Namespace) -> dict[str, str]:
    """The client settings: --command-config, then the secret environment variables, then -X.
    A secret given with -X is used, with a warning: it is visible to every user of the machine."""
    out = dict(getattr(args, "command_config", []) or [])
    for key, var in SECRET_ENV.items():
        if key not in out and os.environ.get(var):
            out[key] = os.environ[var]
    exposed = sorted({k for k, _ in args.extra if is_secret_key(k)})
    if exposed:
        env = [SECRET_ENV[k] for k in exposed if k in SECRET_ENV]
        print(f"twopc: warning: {', '.join(exposed)} given with -X is visible in `ps` and the "
              "shell history; put it in a --command-config file"
              + (f" or in {' / '.join(env)}" if env else ""), file=sys.stderr)
    out.update(dict(args.extra))
    return out


def bootstrap_servers(text: str) -> str:
    """argparse type of --bootstrap-servers: HOST:PORT[,HOST:PORT...], ports 1 to 65535."""
    from twopc.control.config import parse_host_port
    from twopc.control.errors import ConfigError

    entries = [e for e in text.split(",") if e.strip()]
    if not entries:
        raise argparse.ArgumentTypeError("give HOST:PORT[,HOST:PORT...]")
    for entry in entries:
        try:
            parse_host_port(entry)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_checkpoint_args(p: argparse.ArgumentParser, *, required: bool = True,
                        help_text: str = "the twopc checkpoint log (any fsspec URL or a local "
                        "path)") -> None:
    """--checkpoint, --storage-option and -X of the commands that read a twopc log."""
    p.add_argument("--checkpoint", required=required, default=None, metavar="URL", help=help_text)
    p.add_argument("--storage-option", dest="storage", action="append", default=[],
                   type=key_value, metavar="KEY=VALUE", help="fsspec storage option (repeatable; "
                   "JSON values such as true or 3 are decoded, anything else is a string)")
    add_client_settings(p, "extra client settings in librdkafka style (security.protocol=SSL, ...)")


def storage_options(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, raw in args.storage:
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def view_of(log: Log) -> LogView:
    """The log's view; UsageError if no twopc log is there."""
    view = read_view(log)
    if view is None:
        raise UsageError(f"{redact_url(log.url)} holds no twopc log (no binding): check the URL; a query "
                         "that never committed a batch has nothing to show")
    return view


# ---- stuck batches ----------------------------------------------------------------------------


def spans_of(h: Handle) -> list[dict[str, Any]]:
    return [{"topic": s.topic, "partition": s.partition, "first_offset": s.first_offset,
             "last_offset": s.last_offset, "records": s.record_count} for s in h.spans]


def _loss_obj(loss: Any) -> dict[str, Any]:
    return {"task_partition": loss.task_partition, "committed_records": loss.committed_records,
            "rerun_records": loss.rerun_records, "detail": loss.detail}


def _handle_row(h: Handle) -> dict[str, Any]:
    return {"task_partition": h.task_partition, "transactional_id": h.transactional_id,
            "records": h.record_count, "partitions": spans_of(h)}


def is_stuck(b: BatchState) -> bool:
    """Left for an operator or a re-run: undecided, partly committed, or aborted after its intent
    with its decided records lost (kept by the purge until repaired or given up)."""
    return b.status in (BatchStatus.PREPARED, BatchStatus.PARTIAL) or b.awaits_repair


def stuck_batch(view: LogView, b: BatchState) -> dict[str, Any]:
    """What is visible and what was lost of a batch left prepared (undecided), partial, or
    awaiting repair (`is_stuck`), and the losses of the last re-run refused with DataLossError
    (recomputed from the recorded handles)."""
    visible_ids = {h.transactional_id for h in b.committed.values()}
    refused: list[dict[str, Any]] = []
    if b.status is BatchStatus.PARTIAL:
        for seq, rec in view.records:
            if (isinstance(rec, Aborted) and rec.batch == b.batch and rec.intent_seq is None
                    and seq > (b.intent_seq or -1)):
                plan = plan_repair(b.committed, rec.handles)
                if plan.losses:
                    refused.append({"seq": seq, "reason": rec.reason,
                                    "losses": [_loss_obj(x) for x in plan.losses]})
    undecided = b.status is BatchStatus.PREPARED
    lost = ([h for _, h in sorted(b.lost.items())] if b.awaits_repair else
            [] if undecided else [h for h in b.intent if h.transactional_id not in visible_ids])
    return {
        "batch": b.batch,
        "status": b.status.value,
        "intent_seq": b.intent_seq,
        "visible": [_handle_row(h) for _, h in sorted(b.committed.items())],
        "lost": [_handle_row(h) for h in lost],
        # Aborted after its intent: the decided records wait in the Kafka log for a copy.
        "awaits_repair": b.awaits_repair,
        "undecided": [_handle_row(h) for h in b.intent] if undecided else [],
        "data_loss": refused[-1:] if refused else [],
    }


def print_stuck(s: dict[str, Any]) -> None:
    print(f"  batch {s['batch']} ({s['status']}" + (", awaiting repair: its re-run or `twopc "
          "recover --repair copy` copies the lost records forward" if s["awaits_repair"] else "")
          + "):")
    for row in s["visible"]:
        print(f"    visible: Spark partition {row['task_partition']}: {row['records']} records "
              f"({row['transactional_id']})")
    for row in s["lost"]:
        where = ", ".join(f"{p['topic']}[{p['partition']}] {p['records']} records from offset "
                          f"{p['first_offset']}" for p in row["partitions"])
        print(f"    LOST: Spark partition {row['task_partition']}: {row['records']} records "
              f"({row['transactional_id']}; aborted at {where})")
    for row in s["undecided"]:
        print(f"    undecided: Spark partition {row['task_partition']}: {row['records']} records "
              f"({row['transactional_id']})")
    for refused in s["data_loss"]:
        print(f"    DataLossError (record {refused['seq']}): the re-run differs:")
        for x in refused["losses"]:
            print(f"      Spark partition {x['task_partition']}: visible {x['committed_records']} "
                  f"records, re-run {x['rerun_records']} ({x['detail']})")
