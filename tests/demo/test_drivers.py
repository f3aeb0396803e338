"""The test sources' files: whole, and in the order a Spark file source takes them; killing a
driver's session by number only while the number is still ours."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

from twopc.broker.ledger import start_time
from twopc.demo.drivers import SessionLeader, write_json_files


def test_files_are_whole_and_later_files_are_newer(tmp_path: Path) -> None:
    ids = write_json_files(tmp_path, files=5, per_file=3, tag="t")
    ids += write_json_files(tmp_path, files=2, per_file=3, tag="t", first=5)
    files = sorted(tmp_path.glob("f*.json"))
    assert [f.name for f in files] == [f"f{i:03d}.json" for i in range(7)]
    assert not list(tmp_path.glob(".*.tmp"))
    # Spark orders by modification time in milliseconds: each file strictly after the one before.
    mtimes_ms = [f.stat().st_mtime_ns // 1_000_000 for f in files]
    assert all(a < b for a, b in itertools.pairwise(mtimes_ms)), mtimes_ms
    read = [json.loads(line)["value"] for f in files for line in f.read_text().splitlines()]
    assert read == ids and len(set(ids)) == 21 and ids[3] == "t-1-0"


def _session_leader() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True)


def test_a_session_number_now_of_another_process_is_not_killed() -> None:
    # What a reused number looks like: a live session leader that started at another time than
    # the one recorded. Killing "our" session by that number would kill someone else's.
    proc = _session_leader()
    try:
        started = start_time(proc.pid)
        assert started is not None
        assert SessionLeader(proc.pid, started + 1).kill() == 0
        assert proc.poll() is None, "a process that is not ours was killed"
        assert SessionLeader(proc.pid, started).kill() == 1
        assert proc.wait(10) == -9
    finally:
        proc.kill()
        proc.wait()


def test_the_session_of_an_ended_leader_is_still_killed() -> None:
    # The leader ended (and was reaped); a process it left behind keeps the number reserved.
    code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)']); print(p.pid, flush=True)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    leader = SessionLeader.of(proc)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    proc.wait(10)
    try:
        assert leader.kill() == 1
        for _ in range(100):
            if start_time(child) is None or _zombie(child):
                break
            time.sleep(0.05)
        assert start_time(child) is None or _zombie(child), "the leader's orphan survived"
    finally:
        proc.stdout.close()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
