"""Crash and race tests with real processes, on local files and on a local S3 server.

A writer process is killed with SIGKILL at named points of a write (the TWOPC_CRASH_AT hook) and
at random moments; afterwards the log holds no record or a whole one, and reads on. Several
processes appending at once never both win a number.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from ckpt_support import Target
from ckpt_writer import body_is_whole, padded_body

from checkpoint.log import MARK, record_path

WRITER = str(Path(__file__).with_name("ckpt_writer.py"))
ROOT = str(Path(__file__).resolve().parents[2])


def _spawn(target: Target, crash_at: str | None = None, **args: Any) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "TWOPC_CRASH_AT"}
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])
    if crash_at is not None:
        env["TWOPC_CRASH_AT"] = crash_at
    payload = json.dumps({"url": target.url, "options": target.storage_options, **args})
    return subprocess.Popen(
        [sys.executable, WRITER, payload],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out, err


def _fill(target: Target, count: int) -> None:
    log = target.open()
    for seq in range(count):
        log.append(seq, padded_body("setup", seq))


def _assert_log_whole(target: Target) -> int:
    """Every kept record reads whole and in order; returns the last number (-1 if empty)."""
    log = target.open()
    seqs = []
    for record in log.records():
        assert body_is_whole(record.body)
        seqs.append(record.seq)
    assert seqs == list(range(log.low_water_mark(), log.low_water_mark() + len(seqs)))
    last = log.last()
    assert (last.seq if last is not None else -1) == (seqs[-1] if seqs else -1)
    return seqs[-1] if seqs else -1


# Point of the kill -> whether the record exists afterwards.
LOCAL_APPEND_POINTS = {
    "checkpoint.append.before_create": False,
    "checkpoint.record.mid_write": False,
    "checkpoint.record.after_temp_fsync": False,
    "checkpoint.record.after_link": True,
    "checkpoint.append.after_create": True,
    "checkpoint.pointer.mid_write": True,
    "checkpoint.pointer.after_temp_fsync": True,
}
S3_APPEND_POINTS = {
    "checkpoint.append.before_create": False,
    "checkpoint.append.after_create": True,
}


def _append_points(target: Target) -> dict[str, bool]:
    return LOCAL_APPEND_POINTS if target.backend == "file" else S3_APPEND_POINTS


def test_kill_at_each_point_of_an_append(target: Target) -> None:
    _fill(target, 3)
    expected_last = 2
    for point, created in _append_points(target).items():
        code, out, err = _finish(_spawn(target, point, mode="append", writer="w", count=1))
        assert code == -signal.SIGKILL, f"{point}: writer was not killed there: {err}"
        assert out == ""
        if created:
            expected_last += 1
        assert _assert_log_whole(target) == expected_last, point
        if created:
            assert target.open().read(expected_last).body == padded_body("w", 0)
        # The log goes on: the next append lands right after whatever is there.
        target.open().append(expected_last + 1, padded_body("after", expected_last + 1))
        expected_last += 1


PURGE_POINTS_LOCAL = [
    "checkpoint.low_water_mark.mid_write",
    "checkpoint.low_water_mark.after_temp_fsync",
    "checkpoint.purge.after_mark",
    "checkpoint.purge.mid_delete",
]
PURGE_POINTS_S3 = ["checkpoint.purge.after_mark", "checkpoint.purge.mid_delete"]


def test_kill_at_each_point_of_a_purge(target: Target) -> None:
    points = PURGE_POINTS_LOCAL if target.backend == "file" else PURGE_POINTS_S3
    _fill(target, 2)
    for point in points:
        log = target.open()
        last = log.last()
        assert last is not None
        for seq in range(last.seq + 1, last.seq + 6):
            log.append(seq, padded_body("setup", seq))
        below = last.seq + 4
        before = log.low_water_mark()
        code, _, err = _finish(_spawn(target, point, mode="purge", below=below))
        assert code == -signal.SIGKILL, f"{point}: purge was not killed there: {err}"
        mark = target.open().low_water_mark()
        assert mark in (before, below), point
        assert _assert_log_whole(target) == last.seq + 5
    # A later purge sweeps whatever the killed ones left below the mark.
    log = target.open()
    final = log.last()
    assert final is not None
    log.purge(final.seq)
    for seq in range(final.seq):
        assert target.read_raw(record_path(seq)) is None, seq
    assert target.read_raw(MARK) is not None


def test_kill_at_random_moments_leaves_whole_records(target: Target) -> None:
    rng = random.Random(4)
    expected_min = -1
    for round_ in range(4):
        proc = _spawn(target, mode="append", writer=f"r{round_}", count=10_000)
        # Wait for the first append (interpreter and s3fs start-up vary a lot under load), then
        # kill at a random moment among the appends that follow.
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, f"the writer exited before its first append: {proc.stderr and proc.stderr.read()}"
        time.sleep(rng.uniform(0.0, 0.5))
        os.killpg(proc.pid, signal.SIGKILL)
        code, out, _ = _finish(proc)
        assert code == -signal.SIGKILL
        won = [int(line.split()[1]) for line in (first + out).splitlines()]
        last = _assert_log_whole(target)
        # Everything the writer reported is there; at most one more (killed before printing).
        if won:
            assert last in (won[-1], won[-1] + 1)
        assert last >= expected_min
        expected_min = last
        if last >= 0:
            target.open().purge(last)
    assert expected_min > 0, "the writer never got to append: the test proved nothing"


@pytest.mark.parametrize("writers,count", [(4, 12)])
def test_concurrent_appenders_never_share_a_number(
    target: Target, writers: int, count: int
) -> None:
    procs = [_spawn(target, mode="race", writer=f"p{w}", count=count) for w in range(writers)]
    results = [_finish(p, timeout=300) for p in procs]
    wins: dict[int, str] = {}
    for w, (code, out, err) in enumerate(results):
        assert code == 0, err
        for line in out.splitlines():
            seq = int(line.split()[1])
            assert seq not in wins, f"both p{w} and {wins[seq]} won record {seq}"
            wins[seq] = f"p{w}"
    assert sorted(wins) == list(range(writers * count))
    log = target.open()
    per_writer: Counter[str] = Counter()
    for record in log.records():
        assert record.body["writer"] == wins[record.seq]
        assert body_is_whole(record.body)
        per_writer[record.body["writer"]] += 1
    assert per_writer == Counter({f"p{w}": count for w in range(writers)})
