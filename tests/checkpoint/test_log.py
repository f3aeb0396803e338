"""Behaviour of the log and the index, on local files and on a local S3 server."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import fsspec
import msgpack
import pytest
from ckpt_support import BUCKET, S3Server, Target, bodies
from fsspec.implementations.memory import MemoryFileSystem
from hypothesis import HealthCheck, given, settings
from test_framing import _frame

from checkpoint import (
    AppendGap,
    CheckpointError,
    ConditionalCreateUnsupported,
    InvalidPurge,
    InvalidRecord,
    KeyExists,
    LogCorrupt,
    Record,
    RecordBeyondEnd,
    RecordCorrupt,
    RecordExists,
    RecordMissing,
    RecordPurged,
    StorageUnavailable,
    UnsupportedFormatVersion,
    open_log,
)
from checkpoint.log import MARK, POINTER, record_path
from checkpoint.store import probe_conditional_create


def _fill(target: Target, count: int) -> None:
    log = target.open()
    for seq in range(count):
        log.append(seq, {"n": seq})


def test_empty_log(target: Target) -> None:
    log = target.open()
    assert log.last() is None
    assert list(log.since(-1)) == []
    assert log.low_water_mark() == 0
    with pytest.raises(RecordBeyondEnd):
        log.read(0)


def test_append_read_last_since(target: Target) -> None:
    log = target.open()
    for seq in range(5):
        assert log.append(seq, {"n": seq, "kind": "prepared"}) == Record(
            seq, {"n": seq, "kind": "prepared"}
        )
    assert log.last() == Record(4, {"n": 4, "kind": "prepared"})
    assert log.read(2).body == {"n": 2, "kind": "prepared"}
    assert [r.seq for r in log.since(1)] == [2, 3, 4]
    assert list(log.since(4)) == []
    # A second handle (another process would be the same) sees the same log.
    assert target.open().last() == log.last()


def test_lost_race_is_a_typed_error_and_never_moves_on(target: Target) -> None:
    first, second = target.open(), target.open()
    first.append(0, {"by": "first"})
    with pytest.raises(RecordExists) as e:
        second.append(0, {"by": "second"})
    assert e.value.seq == 0
    assert first.read(0).body == {"by": "first"}
    assert first.last() == Record(0, {"by": "first"})


def test_append_with_a_gap_is_refused(target: Target) -> None:
    log = target.open()
    with pytest.raises(AppendGap):
        log.append(1, {})
    log.append(0, {})
    with pytest.raises(AppendGap):
        log.append(2, {})
    assert log.last() == Record(0, {})


def test_bad_input_is_refused_clearly(target: Target) -> None:
    log = target.open()
    with pytest.raises(InvalidRecord):
        log.append(-1, {})
    with pytest.raises(InvalidRecord):
        log.append(0, {1: "int key"})  # type: ignore[dict-item]
    with pytest.raises(InvalidRecord, match="msgpack"):
        log.append(0, {"x": object()})
    with pytest.raises(InvalidRecord):
        log.index.create("", {})
    with pytest.raises(InvalidRecord, match="shorter key"):
        log.index.create("k" * 500, {})
    assert log.last() is None


def test_purge_moves_the_mark_forward_only(target: Target) -> None:
    _fill(target, 6)
    log = target.open()
    log.purge(4)
    assert log.low_water_mark() == 4
    assert target.read_raw(record_path(3)) is None
    assert target.read_raw(record_path(4)) is not None
    log.purge(2)  # moving back is a no-op
    assert log.low_water_mark() == 4
    with pytest.raises(RecordPurged):
        log.read(1)
    with pytest.raises(RecordPurged):
        list(log.since(0))
    assert [r.seq for r in log.since(3)] == [4, 5]
    assert [r.seq for r in log.records()] == [4, 5]
    assert log.last() == Record(5, {"n": 5})
    log.append(6, {"n": 6})
    with pytest.raises(RecordExists):
        log.append(0, {"restart": True})  # purged numbers are never reused


def test_a_purge_deletes_again_what_a_crash_may_have_brought_back(target: Target) -> None:
    """A purge's deletes are made durable by the next purge (one mark write per purge): a record
    a crash brought back below the mark is deleted by the next purge, in the process that starts
    after the crash, while a process that deleted the records itself sends no second delete (a
    request each on object stores)."""
    _fill(target, 8)
    log = target.open()
    log.purge(3)
    assert target.read_raw(record_path(3)) is not None
    assert [target.read_raw(record_path(s)) for s in range(3)] == [None] * 3
    deletes: list[str] = []
    store = log._store  # counting the store's deletes
    real_delete = store.delete
    store.delete = lambda path: (deletes.append(path), real_delete(path))[1]  # type: ignore[method-assign]
    log.purge(5)  # this object deleted 0-2 itself: only records 3 and 4 are deleted now
    assert deletes == [record_path(3), record_path(4)]
    target.write_raw(record_path(4), b"back after a crash")  # an unlink the crash undid
    target.open().purge(6)  # the next process: everything from the last durable sweep, then 5
    assert [target.read_raw(record_path(s)) for s in range(6)] == [None] * 6
    assert [r.seq for r in target.open().records()] == [6, 7]


def test_a_new_process_makes_the_mark_it_read_durable_before_deleting_below_it(
        target: Target) -> None:
    """The mark a purge reads may not be durable yet (its writer killed before the directory's
    fsync): a process that did not write it writes it again durably before it deletes the
    records below it, or a crash could bring back an older mark above a hole."""
    _fill(target, 8)
    target.open().purge(3)  # mark (3, 0): records 0-2 deleted, not yet made durable
    log = target.open()
    ops: list[tuple[str, str, bool]] = []
    store = log._store  # recording the store's writes in order
    real_put, real_delete = store.put, store.delete
    store.put = lambda path, data, *, durable: (  # type: ignore[method-assign]
        ops.append(("put", path, durable)), real_put(path, data, durable=durable))[1]
    store.delete = lambda path: (  # type: ignore[method-assign]
        ops.append(("delete", path, False)), real_delete(path))[1]
    log.purge(5)
    assert ops[0] == ("put", MARK, True)
    assert ops[1:4] == [("delete", record_path(s), False) for s in range(3)]
    assert ops[4] == ("put", MARK, True)
    assert ops[5:] == [("delete", record_path(3), False), ("delete", record_path(4), False)]
    assert log.low_water_mark() == 5
    assert [r.seq for r in target.open().records()] == [5, 6, 7]


def test_purge_never_removes_the_latest_record(target: Target) -> None:
    _fill(target, 3)
    log = target.open()
    with pytest.raises(InvalidPurge):
        log.purge(3)
    log.purge(2)
    assert log.last() == Record(2, {"n": 2})
    with pytest.raises(InvalidPurge):
        log.purge(5)


def test_last_without_pointer_probes_from_the_mark(target: Target) -> None:
    _fill(target, 5)
    target.open().purge(2)
    target.delete_raw(POINTER)
    assert target.open().last() == Record(4, {"n": 4})
    target.write_raw(POINTER, b"garbage")  # only a hint: ignored when unreadable
    assert target.open().last() == Record(4, {"n": 4})


def test_stale_pointer_below_the_mark_is_harmless(target: Target) -> None:
    _fill(target, 2)
    stale = target.read_raw(POINTER)
    assert stale is not None
    log = target.open()
    for seq in range(2, 6):
        log.append(seq, {"n": seq})
    log.purge(5)
    target.write_raw(POINTER, stale)
    assert target.open().last() == Record(5, {"n": 5})


def test_a_missing_record_is_corruption_never_the_end(target: Target) -> None:
    _fill(target, 6)
    target.delete_raw(record_path(3))
    log = target.open()
    with pytest.raises(RecordMissing) as e:
        list(log.since(0))
    assert e.value.seq == 3
    with pytest.raises(RecordMissing):
        log.read(3)
    assert isinstance(e.value, LogCorrupt)


def test_a_lost_tail_named_by_the_pointer_is_corruption(target: Target) -> None:
    _fill(target, 4)
    target.delete_raw(record_path(3))
    with pytest.raises(RecordMissing):
        target.open().last()


def test_a_lost_record_just_past_the_probe_is_corruption(target: Target) -> None:
    _fill(target, 6)
    target.delete_raw(POINTER)
    target.delete_raw(record_path(2))
    with pytest.raises(RecordMissing):
        target.open().last()


def test_the_record_at_the_mark_must_exist(target: Target) -> None:
    _fill(target, 5)
    target.open().purge(3)
    target.delete_raw(POINTER)
    target.delete_raw(record_path(3))
    with pytest.raises(RecordMissing):
        target.open().last()


def test_corrupt_record_on_storage_is_reported_with_its_path(target: Target) -> None:
    _fill(target, 3)
    raw = bytearray(target.read_raw(record_path(1)) or b"")
    raw[-1] ^= 0xFF
    target.write_raw(record_path(1), bytes(raw))
    log = target.open()
    with pytest.raises(RecordCorrupt) as e:
        log.read(1)
    assert e.value.path.endswith(record_path(1))
    assert e.value.path.startswith(target.url)
    with pytest.raises(RecordCorrupt):
        list(log.since(-1))


def test_a_record_read_before_is_read_again_from_its_bytes(target: Target) -> None:
    # A process keeps what it unpacked (a speed-up): it must never stand in for other bytes.
    _fill(target, 3)
    assert target.open().read(1).body == {"n": 1}
    raw = bytearray(target.read_raw(record_path(1)) or b"")
    raw[-1] ^= 0xFF
    target.write_raw(record_path(1), bytes(raw))
    with pytest.raises(RecordCorrupt):
        target.open().read(1)


def test_a_log_started_again_at_the_same_url_reads_its_own_records(target: Target) -> None:
    _fill(target, 2)
    assert [r.body for r in target.open().records()] == [{"n": 0}, {"n": 1}]
    for key in (record_path(0), record_path(1), POINTER):
        target.delete_raw(key)
    log = target.open()
    log.append(0, {"n": "again"})
    assert [r.body for r in target.open().records()] == [{"n": "again"}]


def test_torn_record_is_corrupt(target: Target) -> None:
    _fill(target, 2)
    raw = target.read_raw(record_path(1)) or b""
    target.write_raw(record_path(1), raw[: len(raw) // 2])
    with pytest.raises(RecordCorrupt):
        target.open().last()


def test_a_record_copied_under_another_number_is_corrupt(target: Target) -> None:
    _fill(target, 3)
    target.write_raw(record_path(2), target.read_raw(record_path(1)) or b"")
    with pytest.raises(RecordCorrupt, match="not record 2"):
        target.open().read(2)


def test_newer_format_on_storage_is_refused(target: Target) -> None:
    _fill(target, 1)
    payload = msgpack.packb({"kind": "record", "seq": 1, "body": {}})
    target.write_raw(record_path(1), _frame(2, payload))
    with pytest.raises(UnsupportedFormatVersion):
        target.open().read(1)


def test_corrupt_low_water_mark_stops_reads(target: Target) -> None:
    _fill(target, 3)
    target.open().purge(1)
    target.write_raw(MARK, b"\x89TCK torn")
    with pytest.raises(RecordCorrupt):
        target.open().low_water_mark()


def test_index_create_get(target: Target) -> None:
    log = target.open()
    assert log.index.get("job/2026-01-01 #1") is None
    log.index.create("job/2026-01-01 #1", {"seq": 7})
    assert target.open().index.get("job/2026-01-01 #1") == {"seq": 7}
    with pytest.raises(KeyExists):
        target.open().index.create("job/2026-01-01 #1", {"seq": 8})
    assert log.index.get("job/2026-01-01 #1") == {"seq": 7}
    _fill(target, 4)
    log.purge(3)
    assert log.index.get("job/2026-01-01 #1") == {"seq": 7}  # never purged implicitly


def test_probe_runs_on_open_and_leaves_nothing_behind(target: Target) -> None:
    target.open()
    if target.local_root is not None:
        assert list((target.local_root / "_probe").iterdir()) == []


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=bodies)
def test_any_body_round_trips_through_storage(target: Target, body: dict[str, Any]) -> None:
    log = target.open()
    last = log.last()
    seq = 0 if last is None else last.seq + 1
    log.append(seq, body)
    assert target.open().read(seq) == Record(seq, body)


# -- backends ---------------------------------------------------------------------------


class _NoConditionFS(MemoryFileSystem):  # type: ignore[misc]
    """An in-memory filesystem that, like many backends, ignores create-only requests."""

    protocol = "nocondmem"

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kw: Any) -> None:
        super().pipe_file(path, value, mode="overwrite", **kw)


fsspec.register_implementation("nocondmem", _NoConditionFS, clobber=True)


def test_backend_without_conditional_create_is_refused_with_the_risk() -> None:
    with pytest.raises(ConditionalCreateUnsupported) as e:
        open_log("nocondmem://refused/log")
    assert "both 'win' the same sequence number" in str(e.value)
    assert "allow_unconditional_create" in str(e.value)


def test_explicit_risk_opt_in_opens_the_log(caplog: pytest.LogCaptureFixture) -> None:
    log = open_log("nocondmem://accepted/log", allow_unconditional_create=True)
    log.append(0, {})
    with pytest.raises(RecordExists):  # sequential writers are still told apart
        log.append(0, {})


def test_probe_catches_a_server_that_ignores_the_condition() -> None:
    class Ignoring:
        url = "s3://ignoring"

        def create(self, path: str, data: bytes) -> bool:
            return True

        def delete(self, path: str) -> None:
            pass

    problem = probe_conditional_create(Ignoring())  # type: ignore[arg-type]
    assert problem is not None and "second create" in problem


def test_s3_server_honours_if_none_match(s3_server: S3Server, s3_bucket: str) -> None:
    client = s3_server.client()
    key = f"raw-{uuid.uuid4().hex}"
    client.put_object(Bucket=BUCKET, Key=key, Body=b"1", IfNoneMatch="*")
    with pytest.raises(client.exceptions.ClientError, match="PreconditionFailed"):
        client.put_object(Bucket=BUCKET, Key=key, Body=b"2", IfNoneMatch="*")
    assert client.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"1"


def test_memory_backend_works_in_one_process(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    log = open_log("memory://unit/log")
    log.append(0, {"a": 1})
    assert open_log("memory://unit/log").last() == Record(0, {"a": 1})


def test_unreachable_s3_is_storage_unavailable_with_cause() -> None:
    options = {
        "key": "x",
        "secret": "y",
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1"},
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1},
        "retries": 1,
    }
    with pytest.raises(StorageUnavailable) as e:
        open_log("s3://nowhere/log", options)
    assert e.value.__cause__ is not None
    assert isinstance(e.value, CheckpointError)


def test_local_root_that_is_a_file_is_storage_unavailable(tmp_path: Any) -> None:
    (tmp_path / "plain").write_text("not a directory")
    with pytest.raises(StorageUnavailable) as e:
        open_log(f"file://{tmp_path}/plain/log")
    assert isinstance(e.value.__cause__, OSError)
