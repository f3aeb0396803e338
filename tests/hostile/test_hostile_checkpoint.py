"""Issue 33, the checkpoint log as a hostile or careless user leaves it: crafted frames with a
valid crc32, mutated records of a real twopc log, a bad low-water mark, records copied under
another number. Every read ends in the record read back exactly or in a typed error
(checkpoint.CheckpointError, twopc's InconsistentLog) whose message names the file or record and
what to do; never an untyped exception, never a silent wrong answer."""

from __future__ import annotations

import math
import struct
import uuid
import zlib
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoint import CheckpointError, Log, RecordCorrupt, framing, open_log
from checkpoint.log import MARK, POINTER, record_path
from twopc.errors import TwopcError
from twopc.log.session import BINDING_KEY, Session, check_binding, read_view
from twopc.protocol.handle import Handle, PartitionSpan
from twopc.protocol.log_records import Committed, Prepared
from twopc.protocol.owner import Owner

FIXES = ("restore", "upgrade", "check", "twopc log dump", "investigate", "append at", "read ")


def _frame(payload: bytes, version: int = framing.FORMAT_VERSION) -> bytes:
    head = struct.pack(">4sHI", framing.MAGIC, version, len(payload))
    return head + struct.pack(">I", zlib.crc32(payload, zlib.crc32(head))) + payload


def _assert_typed(exc: BaseException, where: str) -> None:
    assert isinstance(exc, (CheckpointError, TwopcError)), f"untyped {type(exc).__name__}: {exc}"
    text = str(exc)
    assert where in text, f"{text!r} does not name {where!r}"
    assert any(f in text for f in FIXES), f"{text!r} says nothing to do"


# ---- the frame -------------------------------------------------------------------------------

msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats()
    | st.text(max_size=6) | st.binary(max_size=6),
    lambda inner: st.lists(inner, max_size=3)
    | st.lists(st.tuples(inner, inner), max_size=3),  # maps with keys of any type
    max_leaves=10)


def _pack(value: Any) -> bytes:
    """msgpack bytes of `value`, where a list of pairs becomes a map with those keys."""
    packer = msgpack.Packer(use_bin_type=True)

    def enc(v: Any) -> bytes:
        if isinstance(v, list) and v and all(isinstance(p, tuple) for p in v):
            return packer.pack_map_header(len(v)) + b"".join(enc(a) + enc(b) for a, b in v)
        if isinstance(v, list):
            return packer.pack_array_header(len(v)) + b"".join(enc(x) for x in v)
        return packer.pack(v)

    return enc(value)


@settings(max_examples=500, deadline=None)
@given(msgpack_values)
def test_any_valid_crc_frame_decodes_or_is_refused_typed(value: Any) -> None:
    try:
        payload = framing.decode("mem/records/00000000000000000001", _frame(_pack(value)))
    except Exception as exc:
        _assert_typed(exc, "mem/records/00000000000000000001")
    else:
        assert isinstance(payload, dict)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.integers(0, 3))
def test_random_payload_bytes(payload: bytes, version: int) -> None:
    try:
        framing.decode("f", _frame(payload, version))
    except Exception as exc:
        _assert_typed(exc, "f")


def test_a_map_with_a_list_key_is_corrupt_not_a_type_error() -> None:
    payload = b"\x81\x91\x01\x02"  # {[1]: 2}
    with pytest.raises(RecordCorrupt, match="records/7"):
        framing.decode("records/7", _frame(payload))


# ---- a real twopc log, mutated under a valid crc ------------------------------------------------

H = Handle("p-0-1", 4000, 3, (PartitionSpan("t", 0, 10, None, 3, "tid-1"),), 3, "m64v1:ab",
           1_700_000_000_000, 60000, 0, 1, 1_700_000_000_100, "exec-1", 12)


def _new_log() -> Log:
    log = open_log(f"memory://hostile-{uuid.uuid4().hex}")
    check_binding(log, Owner.query("q-1", "p"), create=True)
    s = Session(log)
    s.append(Prepared("0", (H,)))
    s.append(Committed("0", 0, ()))
    s.append(Prepared("1", (H,)))
    return log


def _files(log: Log) -> list[str]:
    return [record_path(0), record_path(1), record_path(2), f"index/k-{BINDING_KEY}", MARK,
            POINTER]


HOSTILE: list[Any] = [None, True, 2.5, math.inf, -math.inf, math.nan, -1, 2**64 - 1, -(2**63),
                      "5", b"5", "", [], [[1]], {}, {"a": 1}, 0, 10**18]


def _mutations(payload: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path] if path else []
    if isinstance(payload, dict):
        for k, v in payload.items():
            out += _mutations(v, (*path, k))
    elif isinstance(payload, list):
        for i, v in enumerate(payload):
            out += _mutations(v, (*path, i))
    return out


def _replace(payload: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    if isinstance(payload, dict):
        return {k: _replace(v, path[1:], value) if k == path[0] else v for k, v in payload.items()}
    return [_replace(v, path[1:], value) if i == path[0] else v for i, v in enumerate(payload)]


def _read_everything(log: Log) -> Any:
    view = read_view(log)
    return None if view is None else (view.owner, view.records, view.state, log.last())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_valid_crc_mutations_of_a_real_log(data: st.DataObject) -> None:
    log = _new_log()
    store = log._store
    name = data.draw(st.sampled_from(_files(log)))
    if name == MARK:
        store.put(MARK, framing.encode({"kind": "mark", "below": 0, "sweep_from": 0}),
                  durable=True)
    raw = store.get(name)
    assert raw is not None
    payload = msgpack.unpackb(raw[framing.HEADER_SIZE:], raw=False)
    path = data.draw(st.sampled_from(_mutations(payload)))
    value = data.draw(st.sampled_from(HOSTILE) | msgpack_values)
    mutated = _replace(payload, path, value)
    try:
        data_bytes = _frame(msgpack.packb(mutated, use_bin_type=True))
    except (TypeError, ValueError, OverflowError):
        return  # not packable: a file cannot hold it
    store.put(name, data_bytes, durable=False)
    try:
        _read_everything(log)
    except Exception as exc:
        _assert_typed(exc, log.url)


# ---- answers that would be silently wrong ---------------------------------------------------


@pytest.mark.parametrize("mark", [{"below": -1, "sweep_from": 0}, {"below": True, "sweep_from": 0},
                                  {"below": 2, "sweep_from": 3}, {"below": 1.0, "sweep_from": 0},
                                  {"below": 2**63, "sweep_from": 0},
                                  {"below": 1, "sweep_from": -5}])
def test_a_low_water_mark_out_of_range_is_corrupt(mark: dict[str, Any]) -> None:
    log = _new_log()
    log._store.put(MARK, _frame(msgpack.packb({"kind": "mark", **mark})), durable=True)
    with pytest.raises(RecordCorrupt) as info:
        list(log.records())
    _assert_typed(info.value, "_low_water_mark")


@pytest.mark.parametrize("seq", [True, 1.0, "1", None])
def test_a_record_whose_number_is_not_an_int_is_corrupt(seq: Any) -> None:
    log = _new_log()
    raw = log._store.get(record_path(1))
    assert raw is not None
    payload = msgpack.unpackb(raw[framing.HEADER_SIZE:], raw=False)
    log._store.put(record_path(1), _frame(msgpack.packb({**payload, "seq": seq})), durable=False)
    with pytest.raises(RecordCorrupt) as info:
        list(log.records())
    _assert_typed(info.value, record_path(1))


def test_a_pointer_hint_of_another_type_is_ignored_not_believed() -> None:
    log = _new_log()
    for seq in (True, 2.0, -1, "2"):
        log._store.put(POINTER, _frame(msgpack.packb({"kind": "pointer", "seq": seq})),
                       durable=False)
        last = log.last()
        assert last is not None and last.seq == 2


def test_a_seeded_sweep_of_12000_valid_crc_mutations() -> None:
    """The issue's count: 12,000 valid-CRC mutations of a real log's files, each read the way
    `twopc status` reads the log; every one reads back or stops with a typed error."""
    import random

    rng = random.Random(33)
    log = _new_log()
    store = log._store
    store.put(MARK, framing.encode({"kind": "mark", "below": 0, "sweep_from": 0}), durable=True)
    originals = {name: store.get(name) for name in _files(log)}
    payloads = {name: msgpack.unpackb(raw[framing.HEADER_SIZE:], raw=False)
                for name, raw in originals.items() if raw is not None}
    paths = {name: _mutations(p) for name, p in payloads.items()}
    untyped: list[str] = []
    for _ in range(12_000):
        name = rng.choice(sorted(payloads))
        path = rng.choice(paths[name])
        value = rng.choice(HOSTILE)
        store.put(name, _frame(msgpack.packb(_replace(payloads[name], path, value),
                                             use_bin_type=True)), durable=False)
        try:
            _read_everything(log)
        except (CheckpointError, TwopcError):
            pass
        except Exception as exc:
            untyped.append(f"{name} {path} = {value!r}: {type(exc).__name__}: {exc}")
        finally:
            raw = originals[name]
            assert raw is not None
            store.put(name, raw, durable=False)
    assert untyped == [], f"{len(untyped)} of 12000 untyped: {untyped[:5]}"
