"""`twopc txn ...` end to end against the real broker, through the CLI's own entry point."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from tests.control.helpers import open_txn, read_committed
from twopc.broker.under_test import KafkaUnderTest
from twopc.cli import main

pytestmark = pytest.mark.integration


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, object]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out) if "--json" in argv else out


def test_describe_list_commit_fence(broker: KafkaUnderTest, topic: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    b = broker.bootstrap_servers
    txn = open_txn(b, topic, tid="cli-open-1")
    code, described = run(capsys, "txn", "describe", "-b", b, "--json", txn.transactional_id)
    assert code == 0 and isinstance(described, list)
    assert described[0]["state"] == "Ongoing"
    assert described[0]["producer_id"] == txn.producer_id
    code, listed = run(capsys, "txn", "list", "-b", b, "--prefix", "cli-open-", "--json")
    assert code == 0 and isinstance(listed, list)
    assert [r["transactional_id"] for r in listed] == ["cli-open-1"]
    code, ended = run(capsys, "txn", "commit", "-b", b, txn.transactional_id, "--producer-id",
                      str(txn.producer_id), "--epoch", str(txn.epoch), "--json")
    assert code == 0 and isinstance(ended, dict) and ended["kind"] == "committed"
    assert len(read_committed(b, topic)) == 20
    code, fenced = run(capsys, "txn", "fence", "-b", b, txn.transactional_id, "--json")
    assert code == 0 and isinstance(fenced, list) and fenced[0]["epoch"] == txn.epoch + 1
    # A commit with the old epoch now cannot be confirmed: exit code 3, "unconfirmed".
    code, text = run(capsys, "txn", "commit", "-b", b, txn.transactional_id, "--producer-id",
                     str(txn.producer_id), "--epoch", str(txn.epoch))
    assert code == 3 and "unconfirmed" in str(text)


def test_bad_input_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    # A malformed argument is a usage error: argparse's exit code 2, the message names the fix.
    with pytest.raises(SystemExit) as exited:
        main(["txn", "describe", "-b", "nohostport", "x"])
    assert exited.value.code == 2
    assert "HOST:PORT" in capsys.readouterr().err


def test_abort(broker: KafkaUnderTest, topic: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`twopc txn abort` by producer id and epoch: the open transaction's records are discarded
    and the last stable offset moves on (a record written after it is read); a wrong epoch is
    refused without touching the transaction; a second abort is idempotent."""
    b = broker.bootstrap_servers
    txn = open_txn(b, topic, tid="cli-abort-1")
    code, text = run(capsys, "txn", "abort", "-b", b, txn.transactional_id, "--producer-id",
                     str(txn.producer_id), "--epoch", str(txn.epoch + 5))
    # A wrong epoch: the coordinator refuses (PRODUCER_FENCED), which proves nothing about the
    # transaction's fate to the CLI: "unconfirmed", exit code 3, and the transaction stays open.
    assert code == 3 and "\tunconfirmed (PRODUCER_FENCED" in str(text), text
    code, described = run(capsys, "txn", "describe", "-b", b, "--json", txn.transactional_id)
    assert isinstance(described, list) and described[0]["state"] == "Ongoing", described

    code, ended = run(capsys, "txn", "abort", "-b", b, txn.transactional_id, "--producer-id",
                      str(txn.producer_id), "--epoch", str(txn.epoch), "--json")
    assert code == 0 and isinstance(ended, dict) and ended["kind"] == "aborted", ended
    code, described = run(capsys, "txn", "describe", "-b", b, "--json", txn.transactional_id)
    assert isinstance(described, list)
    assert described[0]["state"] in ("PrepareAbort", "CompleteAbort"), described
    # Nothing of it is visible, and a record written after it is: it no longer holds the
    # partition's last stable offset back.
    partition = txn.first[0]
    producer = Producer({"bootstrap.servers": b})
    producer.produce(topic, b"after-the-abort", partition=partition)
    assert producer.flush(30) == 0
    assert read_committed(b, topic) == ["after-the-abort"]

    code, text = run(capsys, "txn", "abort", "-b", b, txn.transactional_id, "--producer-id",
                     str(txn.producer_id), "--epoch", str(txn.epoch))
    assert code == 0 and "aborted" in str(text), text
