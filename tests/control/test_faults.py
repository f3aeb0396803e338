"""The control client's test-only fault injector (twopc/control/faults.py): what matches, how it is
switched on (and that it cannot be by the file alone), and what each fault does on the real broker:
a request dropped before it is sent leaves the transaction open, an answer dropped after the
request was sent leaves it ended while the client cannot know, a delay only delays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.control.helpers import open_txn, read_committed
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, EndTxnRequest, OutcomeKind, TxnState
from twopc.control import faults as f
from twopc.control import txn_messages as m
from twopc.control.messages import ApiKey

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_plan_left() -> Iterator[None]:
    yield
    f.uninstall()


def _end_body(version: int, tid: str) -> bytes:
    return m.encode_end_txn(version, tid, 7, 3, True)


@pytest.mark.parametrize("version", [0, 3, 4])  # classic and compact strings
def test_the_transactional_id_is_read_from_the_body(version: int) -> None:
    assert f.transactional_id_of(ApiKey.END_TXN, version, _end_body(version, "q-1-0")) == "q-1-0"
    body = m.encode_add_partitions_to_txn(version if version < 4 else 3, "q-2-1", 7, 3, [("t", 0)])
    assert f.transactional_id_of(ApiKey.ADD_PARTITIONS_TO_TXN, min(version, 3), body) == "q-2-1"
    assert f.transactional_id_of(ApiKey.INIT_PRODUCER_ID, 4,
                                 m.encode_init_producer_id(4, "q-3-0", 1000)) == "q-3-0"
    assert f.transactional_id_of(ApiKey.FETCH, 12, b"\x00\x01") is None


def test_skip_then_count_by_id_and_api() -> None:
    plan = f.FaultPlan((f.Fault("END_TXN", f.Action.DROP_REQUEST, transactional_id="a",
                                skip=1, count=2),))
    with f.injected(plan):
        hits = [f.pick(ApiKey.END_TXN, 4, _end_body(4, tid)) is not None
                for tid in ["a", "b", "a", "a", "a", "a"]]
        assert f.pick(ApiKey.INIT_PRODUCER_ID, 4, m.encode_init_producer_id(4, "a", 1)) is None
    assert hits == [False, False, True, True, False, False]
    assert [(x.api, x.transactional_id, x.action) for x in plan.fired] == [
        ("END_TXN", "a", "drop_request")] * 2
    assert f.pick(ApiKey.END_TXN, 4, _end_body(4, "a")) is None  # uninstalled


def test_a_fault_names_a_known_api_and_an_id_only_where_requests_carry_one() -> None:
    with pytest.raises(ValueError, match="unknown API"):
        f.Fault("END_TX", f.Action.DELAY)
    with pytest.raises(ValueError, match="no single transactional id"):
        f.Fault("DESCRIBE_TRANSACTIONS", f.Action.DELAY, transactional_id="a")


def test_the_control_file_alone_does_nothing_it_needs_the_arming_switch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    control = str(tmp_path / "faults.json")
    f.write_control(control, [f.Fault("END_TXN", f.Action.DROP_ANSWER)])
    monkeypatch.setenv(f.CONTROL_ENV, control)
    monkeypatch.delenv(f.ARM_ENV, raising=False)
    assert f.pick(ApiKey.END_TXN, 4, _end_body(4, "a")) is None
    monkeypatch.setenv(f.ARM_ENV, "1")  # not the exact value
    assert f.pick(ApiKey.END_TXN, 4, _end_body(4, "a")) is None
    monkeypatch.setenv(f.ARM_ENV, f.ARM_VALUE)
    got = f.pick(ApiKey.END_TXN, 4, _end_body(4, "a"))
    assert got is not None and got.action is f.Action.DROP_ANSWER
    # Re-read when it changes: a test switches faults while its child runs.
    time.sleep(0.01)
    f.write_control(control, [])
    os.utime(control, (time.time() + 5, time.time() + 5))
    assert f.pick(ApiKey.END_TXN, 4, _end_body(4, "a")) is None


# ---- on the real broker ---------------------------------------------------------------------


def _client(broker: KafkaUnderTest) -> ControlClient:
    # A short retry budget: a fault on every attempt exhausts it in about a second.
    return ControlClient(broker.config(**{"twopc.control.retry.timeout.ms": "1000"}))


@pytest.mark.integration
@pytest.mark.all_variants
def test_drop_request_leaves_the_transaction_open(
        broker: KafkaUnderTest, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=1)
    txn = open_txn(broker.bootstrap_servers, topic, count=3)
    req = EndTxnRequest(txn.transactional_id, txn.producer_id, txn.epoch, True)
    plan = f.FaultPlan((f.Fault("END_TXN", f.Action.DROP_REQUEST,
                                transactional_id=txn.transactional_id),))
    with _client(broker) as control:
        with f.injected(plan):
            out = control.end_txns([req], precheck=False)[txn.transactional_id]
        assert out.kind is OutcomeKind.UNCONFIRMED, out  # retries exhausted: NETWORK_EXCEPTION
        assert len(plan.fired) >= 2  # every retry was dropped too
        d = control.describe_transactions([txn.transactional_id])[txn.transactional_id]
        assert d.state is TxnState.ONGOING and d.holds(txn.producer_id, txn.epoch), d
        # Without the fault the same request commits it.
        assert control.end_txns([req])[txn.transactional_id].committed
    assert sorted(read_committed(broker.bootstrap_servers, topic)) == ["r-0", "r-1", "r-2"]


@pytest.mark.integration
@pytest.mark.all_variants
@pytest.mark.parametrize("count", [1, None])
def test_drop_answer_ends_the_transaction_unseen(
        broker: KafkaUnderTest, make_topic: Callable[..., str], count: int | None) -> None:
    topic = make_topic(partitions=1)
    txn = open_txn(broker.bootstrap_servers, topic, count=3)
    req = EndTxnRequest(txn.transactional_id, txn.producer_id, txn.epoch, True)
    plan = f.FaultPlan((f.Fault("END_TXN", f.Action.DROP_ANSWER,
                                transactional_id=txn.transactional_id, count=count),))
    with _client(broker) as control:
        with f.injected(plan):
            out = control.end_txns([req], precheck=False)[txn.transactional_id]
        d = control.describe_transactions([txn.transactional_id])[txn.transactional_id]
    assert d.state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT), d
    if count == 1:  # the retry is answered: a repeated commit answers NONE
        assert out.committed and len(plan.fired) == 1, (out, plan.fired)
    else:  # every answer lost: the client cannot tell, the broker committed
        assert out.kind is OutcomeKind.UNCONFIRMED and len(plan.fired) >= 2, (out, plan.fired)
    assert sorted(read_committed(broker.bootstrap_servers, topic)) == ["r-0", "r-1", "r-2"]


@pytest.mark.integration
def test_delay_and_the_armed_control_file_in_another_process(
        broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    txn = open_txn(broker.bootstrap_servers, topic, count=3)
    control_file, fired_log = str(tmp_path / "faults.json"), str(tmp_path / "fired.jsonl")
    f.write_control(control_file, f.FaultPlan(
        (f.Fault("END_TXN", f.Action.DELAY, transactional_id=txn.transactional_id,
                 delay_s=1.5),), log=fired_log))
    script = (
        "import json, sys, time\n"
        "from twopc.control import ControlClient, EndTxnRequest\n"
        "a = json.loads(sys.argv[1])\n"
        "with ControlClient({'bootstrap.servers': a['bootstrap']}) as c:\n"
        "    t = time.monotonic()\n"
        "    out = c.end_txns([EndTxnRequest(a['tid'], a['pid'], a['epoch'], True)],"
        " precheck=False)[a['tid']]\n"
        "    print(json.dumps({'kind': out.kind.value, 's': time.monotonic() - t}))\n")
    arg = json.dumps({"bootstrap": broker.bootstrap_servers, "tid": txn.transactional_id,
                      "pid": txn.producer_id, "epoch": txn.epoch})
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWOPC_")}
    env.update({f.CONTROL_ENV: control_file, f.ARM_ENV: f.ARM_VALUE})
    proc = subprocess.run([sys.executable, "-c", script, arg], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["kind"] == "committed" and out["s"] >= 1.5, out
    assert "FAULT INJECTION ARMED" in proc.stderr  # an armed process says so in its log
    assert [(x.api, x.transactional_id, x.action) for x in f.read_fired(fired_log)] == [
        ("END_TXN", txn.transactional_id, "delay")]
    assert sorted(read_committed(broker.bootstrap_servers, topic)) == ["r-0", "r-1", "r-2"]
