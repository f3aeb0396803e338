"""The arguments every command shares: a malformed KEY=VALUE is a usage error (exit code 2, the
argument and the expected form named) before anything is opened or asked, in every command."""

from __future__ import annotations

from pathlib import Path

import pytest

from twopc.cli import main

# No broker listens there and no log is read: the usage error must come first.
BROKER = ["--bootstrap-servers", "127.0.0.1:1"]


@pytest.mark.parametrize("command", [
    ["status", "--checkpoint", "{log}"],
    ["recover", "--checkpoint", "{log}", *BROKER],
    ["check", *BROKER, "--topic", "t", "--prefix", "p"],
    ["verify", *BROKER, "--topic", "t"],
    ["txn", "list", *BROKER],
    ["txn", "describe", *BROKER, "p-0-0"],
])
@pytest.mark.parametrize("bad", ["nonsense", "=value"])
def test_malformed_client_setting_is_a_usage_error(
        command: list[str], bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "log"
    argv = [a.replace("{log}", str(log)) for a in command]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "-X", "security.protocol=SSL", "-X", bad])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "-X" in err and f"{bad!r} is not KEY=VALUE" in err, err
    assert not log.exists()  # nothing opened, nothing created


def test_malformed_storage_option_is_a_usage_error(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["status", "--checkpoint", str(tmp_path / "log"), "--storage-option", "anon"])
    assert exited.value.code == 2
    assert "--storage-option: 'anon' is not KEY=VALUE" in capsys.readouterr().err


def test_client_settings_and_storage_options_parsed_once() -> None:
    from twopc.cli import build_parser
    from twopc.cli._common import client_settings, storage_options

    args = build_parser().parse_args([
        "status", "--checkpoint", "/x", "-X", " security.protocol =SSL", "-X", "a=b=c",
        "-X", "a=d", "--storage-option", "anon=false", "--storage-option", "k=v"])
    assert client_settings(args) == {"security.protocol": "SSL", "a": "d"}
    assert storage_options(args) == {"anon": False, "k": "v"}
