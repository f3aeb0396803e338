"""`twopc txn list|describe|commit|abort|fence`: find and finish Kafka transactions by hand.

Stuck transactions hold back the last stable offset: read_committed consumers of every partition
they touched see nothing past them. These commands let an operator look and act.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from twopc.cli._common import add_client_settings, bootstrap_servers, client_settings, integer
from twopc.cli._output import emit_json, fail
from twopc.control import (
    ConfigError,
    ControlClient,
    ControlError,
    EndTxnRequest,
    OutcomeKind,
    TransactionDescription,
    TxnState,
)

COMMIT_HELP = """\
Commit a transaction another process left open, with its producer id and epoch (from `twopc txn
describe`). Its pending batches become visible to read_committed consumers. Answers:
committed / already_committed; "unconfirmed" (e.g. PRODUCER_FENCED) means the coordinator no
longer knows that transaction (it timed out or was fenced): the records may or may not be
committed, and only the log can tell (twopc recovery settles it); nothing is called lost here."""
ABORT_HELP = """\
Abort a transaction with its producer id and epoch: its pending batches are discarded
(read_committed consumers skip them) and the last stable offset moves on. A producer still
running with that id may start a new transaction afterwards: use `fence` to stop it."""
FENCE_HELP = """\
Fence transactional ids (InitProducerId): bumps each id's epoch, aborts its open transaction
(pending batches are discarded), and stops any producer still holding the id from writing again.
The coordinator then forgets the fenced transaction's outcome; the log still records whether its
batches were committed or aborted (twopc's log check reads it)."""


def register(sub: Any) -> None:
    p = sub.add_parser("txn", help="list, describe, commit, abort or fence Kafka transactions",
                       description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    def common(name: str, help_text: str, description: str) -> argparse.ArgumentParser:
        a: argparse.ArgumentParser = actions.add_parser(
            name, help=help_text, description=description,
            formatter_class=argparse.RawDescriptionHelpFormatter)
        a.add_argument("--bootstrap-servers", "-b", required=True, metavar="HOST:PORT[,...]",
                       type=bootstrap_servers)
        add_client_settings(a, "client setting in librdkafka style, e.g. -X security.protocol="
                            "SASL_SSL -X sasl.mechanism=SCRAM-SHA-512 (repeatable)", "--config", "-X")
        a.add_argument("--json", action="store_true", help="machine-readable output")
        return a

    ls = common("list", "list transactions known to the coordinators",
                "List transactions known to every coordinator (read-only).")
    ls.add_argument("--prefix", help="only transactional ids starting with this")
    ls.add_argument("--state", action="append", default=[], choices=[
        s.value for s in TxnState if s is not TxnState.UNKNOWN_ID], help="repeatable")
    ls.set_defaults(handler=_list)

    d = common("describe", "show state, producer id, epoch, age and partitions",
               "Describe transactional ids (read-only): state, producer id and epoch, start time, "
               "timeout and the partitions whose last stable offset an open transaction holds.")
    d.add_argument("ids", nargs="+", metavar="ID")
    d.set_defaults(handler=_describe)

    for name, text, commit in (("commit", COMMIT_HELP, True), ("abort", ABORT_HELP, False)):
        c = common(name, f"{name} one open transaction by producer id and epoch", text)
        c.add_argument("id", metavar="ID")
        c.add_argument("--producer-id", type=integer(0, 2**63 - 1, "a producer id"), required=True)
        c.add_argument("--epoch", type=integer(0, 2**15 - 1, "an epoch"), required=True)
        c.set_defaults(handler=_end, commit=commit)

    f = common("fence", "fence ids: abort their open transaction, stop their producers",
               FENCE_HELP)
    f.add_argument("ids", nargs="+", metavar="ID")
    f.set_defaults(handler=_fence)


def _client(args: argparse.Namespace) -> ControlClient:
    return ControlClient({"bootstrap.servers": args.bootstrap_servers, **client_settings(args)})


def _run(args: argparse.Namespace, action: Any) -> int:
    try:
        with _client(args) as client:
            return int(action(client))
    except ConfigError as exc:  # a bad -X setting: a bad argument
        return fail(f"{exc}: fix the setting (-X or --command-config)")
    except ControlError as exc:
        return fail(str(exc), 1)


def _describe_row(d: TransactionDescription) -> dict[str, Any]:
    row = asdict(d)
    row["state"] = d.state.value
    row["partitions"] = [f"{t}-{p}" for t, p in d.partitions]
    return row


def _list(args: argparse.Namespace) -> int:
    def act(client: ControlClient) -> int:
        rows = client.list_transactions(args.prefix, [TxnState(s) for s in args.state])
        if args.json:
            emit_json([{**asdict(r), "state": r.state.value} for r in rows])
        else:
            for r in rows:
                print(f"{r.transactional_id}\t{r.state.value}\tproducer_id={r.producer_id}"
                      f"\tcoordinator={r.coordinator_id}")
        return 0
    return _run(args, act)


def _describe(args: argparse.Namespace) -> int:
    def act(client: ControlClient) -> int:
        found = client.describe_transactions(args.ids)
        if args.json:
            emit_json([_describe_row(d) for d in found.values()])
        else:
            for d in found.values():
                parts = ",".join(f"{t}-{p}" for t, p in d.partitions) or "-"
                print(f"{d.transactional_id}\t{d.state.value}\tproducer_id={d.producer_id}\t"
                      f"epoch={d.producer_epoch}\tstart_ms={d.start_ms}\t"
                      f"timeout_ms={d.timeout_ms}\tpartitions={parts}")
        return 0
    return _run(args, act)


def _end(args: argparse.Namespace) -> int:
    def act(client: ControlClient) -> int:
        req = EndTxnRequest(args.id, args.producer_id, args.epoch, args.commit)
        out = client.end_txns([req])[args.id]
        if args.json:
            emit_json({**asdict(out), "kind": out.kind.value})
        else:
            extra = f" ({out.error}: {out.detail})" if out.error else ""
            print(f"{out.transactional_id}\t{out.kind.value}{extra}")
        done = out.committed if args.commit else out.aborted
        return 0 if done else (3 if out.kind is OutcomeKind.UNCONFIRMED else 1)
    return _run(args, act)


def _fence(args: argparse.Namespace) -> int:
    def act(client: ControlClient) -> int:
        results = client.fence(args.ids)
        if args.json:
            emit_json([asdict(r) for r in results.values()])
        else:
            for r in results.values():
                status = "fenced" if r.fenced else f"failed ({r.error})"
                print(f"{r.transactional_id}\t{status}\tproducer_id={r.producer_id}\t"
                      f"epoch={r.epoch}")
        return 0 if all(r.fenced for r in results.values()) else 1
    return _run(args, act)
