"""The faulty:// filesystem (testing/twopc_testing/faulty_fs.py): local files, faults from a control file,
an atomic create-if-absent, and the checkpoint log running on it (and failing when told)."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest
from twopc_testing.faulty_fs import (
    FaultyFileSystem,
    StorageFault,
    clear_control,
    write_control,
)

from checkpoint import open_log
from checkpoint.errors import StorageUnavailable


def fs_for(control: Path) -> FaultyFileSystem:
    return FaultyFileSystem(control=str(control), skip_instance_cache=True)


def test_registered_with_fsspec_by_entry_point() -> None:
    assert isinstance(fsspec.filesystem("faulty"), FaultyFileSystem)


def test_no_control_file_means_no_fault(tmp_path: Path) -> None:
    fs = fs_for(tmp_path / "absent.json")
    fs.pipe_file(f"faulty://{tmp_path}/a/b", b"x")
    assert fs.cat_file(f"faulty://{tmp_path}/a/b") == b"x"
    assert (tmp_path / "a" / "b").read_bytes() == b"x"


def test_create_refuses_an_existing_name(tmp_path: Path) -> None:
    fs = fs_for(tmp_path / "c.json")
    fs.pipe_file(str(tmp_path / "k"), b"1", mode="create")
    with pytest.raises(FileExistsError):
        fs.pipe_file(str(tmp_path / "k"), b"2", mode="create")
    assert (tmp_path / "k").read_bytes() == b"1"


def test_failures_follow_the_control_file(tmp_path: Path) -> None:
    control = tmp_path / "c.json"
    fs = fs_for(control)
    target = str(tmp_path / "records" / "r1")
    fs.pipe_file(target, b"1")
    write_control(str(control), fail=("read",), match="records/", after=1)
    assert fs.cat_file(target) == b"1"  # the first matching operation passes
    with pytest.raises(StorageFault):
        fs.cat_file(target)
    fs.pipe_file(str(tmp_path / "other"), b"2")  # writes, and other paths, are untouched
    clear_control(str(control))
    assert fs.cat_file(target) == b"1"
    with pytest.raises(ValueError, match="unknown operations"):
        write_control(str(control), fail=("rename",))


def test_the_checkpoint_log_runs_on_it_and_reports_injected_failures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    control = tmp_path / "c.json"
    monkeypatch.setenv("TWOPC_FAULTY_FS", str(control))
    log = open_log(f"faulty://{tmp_path}/log")  # probes the conditional create for real
    log.append(0, {"n": 1})
    write_control(str(control), fail=("write",), match="records/")
    with pytest.raises(StorageUnavailable):
        log.append(1, {"n": 2})
    clear_control(str(control))
    log.append(1, {"n": 2})
    assert [r.body for r in open_log(f"faulty://{tmp_path}/log").records()] == [{"n": 1}, {"n": 2}]


def test_a_transient_fault_fails_only_so_many_times(tmp_path: Path) -> None:
    control = tmp_path / "c.json"
    fs = fs_for(control)
    write_control(str(control), fail=("write",), match="records/", times=1)
    with pytest.raises(StorageFault):
        fs.pipe_file(str(tmp_path / "records" / "r1"), b"1", mode="create")
    assert not (tmp_path / "records" / "r1").exists()  # it failed before writing
    # The next one passes, in this instance or any other (the count is kept beside the file).
    fs_for(control).pipe_file(str(tmp_path / "records" / "r1"), b"1", mode="create")
    fs.pipe_file(str(tmp_path / "records" / "r2"), b"2", mode="create")
    assert (tmp_path / "records" / "r1").read_bytes() == b"1"


def test_a_lost_reply_fails_after_the_write_was_done(tmp_path: Path) -> None:
    control = tmp_path / "c.json"
    fs = fs_for(control)
    write_control(str(control), fail=("write",), match="records/", times=1, lose_reply=True)
    with pytest.raises(StorageFault, match="reply was lost"):
        fs.pipe_file(str(tmp_path / "records" / "r1"), b"1", mode="create")
    assert (tmp_path / "records" / "r1").read_bytes() == b"1"  # the store did it
    with pytest.raises(FileExistsError):  # and a second create finds it
        fs.pipe_file(str(tmp_path / "records" / "r1"), b"2", mode="create")
