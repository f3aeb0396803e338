"""Issue 33, the command line as a careless user types it, without a broker: every input ends in
an exit code with a message naming the argument or input (and what to do), never a traceback;
`twopc check` reports the client settings it refuses as its `connection` FAIL (exit 2), as
docs/operations.md promises. Before this change 9 of these inputs gave tracebacks."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoint import open_log
from twopc.cli import main
from twopc.control.config import settings_from_config
from twopc.control.connection import BrokerConnection
from twopc.control.errors import BrokerConnectionError
from twopc.log.session import Session, check_binding
from twopc.protocol.log_records import Committed, Prepared
from twopc.protocol.owner import Owner

NOWHERE = "127.0.0.1:1"  # refused at once: nothing listens on port 1


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _log(tmp: Path) -> str:
    url = str(tmp / f"log-{uuid.uuid4().hex[:6]}")
    log = open_log(url)
    check_binding(log, Owner.query("q-1", "orders"), create=True)
    s = Session(log)
    s.append(Prepared("0", ()))
    s.append(Committed("0", 0, ()))
    return url


CHECK = ["check", "--topic", "t", "--prefix", "p", "--json"]


@pytest.mark.parametrize(("extra", "needle"), [
    (["--bootstrap-servers", NOWHERE, "-X", "bogus.key=1"], "bogus.key"),
    (["--bootstrap-servers", "h:9092", "-X", "security.protocol=SASL_SSL",
      "-X", "sasl.mechanism=GSSAPI", "-X", "sasl.username=u", "-X", "sasl.password=p"], "GSSAPI"),
    (["--bootstrap-servers", "hostonly"], "hostonly"),
    (["--bootstrap-servers", "h:99999"], "99999"),
    (["--bootstrap-servers", "h:0"], "port 0"),
    (["--bootstrap-servers", "h:9092", "-X", "security.protocol=BOGUS"], "BOGUS"),
    (["--bootstrap-servers", "h:9092", "-X", "security.protocol=SSL",
      "-X", "ssl.keystore.location=/k.jks"], "ssl.keystore.location"),
    (["--bootstrap-servers", NOWHERE], NOWHERE),
])
def test_check_reports_refused_settings_as_connection_fail(
        extra: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(CHECK + extra, capsys)
    assert code == 2
    items = json.loads(out)["items"]
    assert [i["name"] for i in items] == ["connection"] and items[0]["status"] == "FAIL"
    assert needle in items[0]["detail"] and items[0]["fix"]


@pytest.mark.parametrize(("argv", "needle"), [
    (["verify", "--bootstrap-servers", NOWHERE, "--topic", "t", "--expect", "3",
      "--id-format", "r-{1}"], "r-{1}"),
    (["verify", "--bootstrap-servers", NOWHERE, "--topic", "t", "--expect", "3",
      "--id-format", "{"], "--id-format"),
    (["verify", "--bootstrap-servers", NOWHERE, "--topic", "t", "--expect", "3",
      "--id-format", "{x}"], "--id-format"),
    (["verify", "--bootstrap-servers", NOWHERE, "--topic", "t", "--expect", "3",
      "--id-format", "r"], "same id"),
    (["verify", "--bootstrap-servers", NOWHERE, "--topic", "t", "--id-format", "r-{}"],
     "--expect"),
    (["verify", "--bootstrap-servers", NOWHERE, "--topic", "t", "--expect", "-1"], "--expect"),
    (["verify", "--bootstrap-servers", NOWHERE, "--topic", "t", "--timeout", "nan"], "--timeout"),
    (["verify", "--bootstrap-servers", NOWHERE, "--topic", "t", "--settle", "-1"], "--settle"),
    (["verify", "--bootstrap-servers", "h:70000", "--topic", "t"], "70000"),
    (["verify", "--bootstrap-servers", NOWHERE, "--topic", "t", "--id", "header:"], "--id"),
    (["txn", "describe", "-b", "h:99999", "x"], "99999"),
    (["txn", "commit", "x", "-b", NOWHERE, "--producer-id", "-1", "--epoch", "0"],
     "--producer-id"),
    (["txn", "commit", "x", "-b", NOWHERE, "--producer-id", "1", "--epoch", "40000"], "--epoch"),
    (["txn", "list", "-b", NOWHERE, "-X", "security.protocol=SASL_SSL",
      "-X", "sasl.mechanism=GSSAPI"], "GSSAPI"),
    (["check", "--bootstrap-servers", NOWHERE, "--topic", "t", "--prefix", "p",
      "--transaction-timeout-ms", "-5"], "--transaction-timeout-ms"),
    (["broker", "start", "--port", "99999"], "--port"),
    (["demo", "--records", "-3"], "--records"),
    (["log", "dump", "--checkpoint", "/nonexistent/twopc-log"], "/nonexistent/twopc-log"),
    (["status", "--checkpoint", "/nonexistent/twopc-log"], "/nonexistent/twopc-log"),
    (["check", "--bootstrap-servers", NOWHERE, "--topic", "t", "--prefix", "p",
      "--command-config", "/nonexistent/client.properties"], "client.properties"),
])
def test_bad_inputs_exit_2_naming_them(argv: list[str], needle: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(argv, capsys)
    assert code == 2, err
    assert needle in err, err


@pytest.mark.parametrize(("flag", "value"), [
    ("--batches", "-1"), ("--batches", "x"), ("--warn-ratio", "nan"), ("--warn-ratio", "inf"),
    ("--warn-ratio", "-0.5"), ("--bootstrap-servers", "hostonly"),
    ("--bootstrap-servers", "h:99999")])
def test_status_refuses_bad_numbers(flag: str, value: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["status", "--checkpoint", _log(tmp_path), flag, value], capsys)
    assert code == 2 and flag in err, err


def test_status_shows_batch_0_and_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["status", "--checkpoint", _log(tmp_path), "--json"], capsys)
    assert code == 0 and [b["batch"] for b in json.loads(out)["batches"]] == ["0"]


def test_recover_on_a_misspelt_path_creates_nothing(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-log"
    code, _, err = run(["recover", "--checkpoint", str(missing), "--bootstrap-servers", NOWHERE,
                        "--no-progress"], capsys)
    assert code == 2 and str(missing) in err
    assert not missing.exists()


@pytest.mark.parametrize("text", ['{"format": 1, "owner', "[]", '{"format": 1}',
                                  '{"format": 1, "owner_id": "q-1", "at_ms": 1, "figures": '
                                  '{"commit_latency_ms": "slow"}}'])
def test_a_malformed_journal_file_does_not_crash_status(
        text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = _log(tmp_path)
    (Path(url) / "observe").mkdir()
    (Path(url) / "observe" / "batch-0.json").write_text(text)
    for extra in ([], ["--json"]):
        code, out, _ = run(["status", "--checkpoint", url, *extra], capsys)
        assert code == 0
        assert "batch-0.json" in out and "delete it" in out


def test_log_dump_prints_records_and_names_an_unreadable_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = _log(tmp_path)
    code, out, _ = run(["log", "dump", "--checkpoint", url], capsys)
    assert code == 0 and "prepared" in out and "committed" in out and "2 record(s)" in out
    open_log(url).append(2, {"kind": "committed", "v": 1, "batch": {"a": 1}, "intent": 0,
                             "losers": []})
    code, out, _ = run(["log", "dump", "--checkpoint", url, "--json"], capsys)
    rows = json.loads(out)["records"]
    assert code == 1 and rows[2]["seq"] == 2 and "batch" in rows[2]["error"]
    code, out, _ = run(["log", "dump", "--checkpoint", url, "--from", "2"], capsys)
    assert code == 1 and "UNREADABLE" in out and "1 record(s)" in out


def test_status_names_log_dump_for_an_inconsistent_log(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = _log(tmp_path)
    open_log(url).append(2, {"kind": "committed", "v": 1, "batch": 2.5, "intent": 0,
                             "losers": []})
    code, _, err = run(["status", "--checkpoint", url], capsys)
    assert code == 2 and "record 2" in err and f"twopc log dump --checkpoint {url}" in err
    code, _, _ = run(["log", "dump", "--checkpoint", url], capsys)
    assert code == 1


def test_passwords_from_a_file_or_the_environment(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from twopc.cli import build_parser
    from twopc.cli._common import client_settings

    props = tmp_path / "client.properties"
    props.write_text("# the job's settings\nsecurity.protocol=SASL_SSL\nsasl.password = s3cret\n")
    args = build_parser().parse_args(["txn", "list", "-b", NOWHERE, "--command-config",
                                      str(props), "-X", "sasl.username=u"])
    assert client_settings(args) == {"security.protocol": "SASL_SSL", "sasl.password": "s3cret",
                                     "sasl.username": "u"}
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("TWOPC_SASL_PASSWORD", "from-env")
    args = build_parser().parse_args(["txn", "list", "-b", NOWHERE])
    assert client_settings(args)["sasl.password"] == "from-env"
    args = build_parser().parse_args(["txn", "list", "-b", NOWHERE, "-X", "sasl.password=x"])
    assert client_settings(args)["sasl.password"] == "x"
    err = capsys.readouterr().err
    assert "visible in `ps`" in err and "--command-config" in err and "x" not in err.split(":")[0]
    props.write_text("no equals sign here: s3cret\n")
    code, _, err = run(["txn", "list", "-b", NOWHERE, "--command-config", str(props)], capsys)
    assert code == 2 and "line 1" in err and "s3cret" not in err


def test_a_connect_timeout_says_what_happened(monkeypatch: pytest.MonkeyPatch) -> None:
    async def never(*_a: Any, **_k: Any) -> Any:
        raise asyncio.TimeoutError()

    monkeypatch.setattr(asyncio, "open_connection", never)
    conn = BrokerConnection("h", 9092, settings_from_config({"bootstrap.servers": "h:9092"}))
    with pytest.raises(BrokerConnectionError) as info:
        asyncio.run(conn.connect())
    text = str(info.value)
    assert "no answer within 10 s" in text and "check the address" in text


_VALUES = (st.integers(-(2**40), 2**40).map(str) | st.text(max_size=6)
           | st.sampled_from(["nan", "inf", "-inf", "-1", "0", "0.5", "1e400", "x", ""]))


@settings(max_examples=60, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(flags=st.dictionaries(st.sampled_from(["--batches", "--warn-ratio"]), _VALUES, max_size=2))
def test_status_arguments_fuzzed(flags: dict[str, str], tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    url = os.path.join(tmp_path, "fuzzed")
    if not os.path.isdir(url):
        check_binding(open_log(url), Owner.query("q-1", "orders"), create=True)
    argv = ["status", "--checkpoint", url]
    for k, v in flags.items():
        argv += [k, v] if not v.startswith("-") else [f"{k}={v}"]
    code, _, err = run(argv, capsys)
    assert code in (0, 1, 2)
    if code == 2:
        assert any(k in err for k in flags), err
