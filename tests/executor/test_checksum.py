"""The order-insensitive checksum and row validation: pure, no broker."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twopc.executor.checksum import MultisetChecksum, checksum_of, identity_hashes, record_hashes
from twopc.executor.rows import Row, RowError, encode_headers, fields_of

names = st.sampled_from(["orders", "events", "t-1"])
blobs = st.binary(max_size=64)
headers = st.lists(st.tuples(st.text(max_size=5), st.none() | blobs), max_size=2).map(tuple)
records = st.tuples(names, st.none() | blobs, blobs, headers)


@settings(deadline=None)  # the first call imports pandas
@given(st.lists(records, max_size=40), st.randoms())
def test_the_same_records_in_another_order_give_the_same_checksum(rs: list, rnd) -> None:
    shuffled = list(rs)
    rnd.shuffle(shuffled)
    assert checksum_of(shuffled) == checksum_of(rs)


@settings(deadline=None)  # the first call imports pandas
@given(st.lists(records, min_size=1, max_size=40), st.integers(1, 7))
def test_chunking_does_not_change_the_checksum(rs: list, size: int) -> None:
    acc = MultisetChecksum()
    for start in range(0, len(rs), size):
        part = rs[start:start + size]
        ids = identity_hashes("", [r[2] for r in part], [r[1] for r in part],
                              [(i, r[0]) for i, r in enumerate(part)])
        acc.add_hashes(record_hashes(ids, [(i, encode_headers(r[3]))
                                           for i, r in enumerate(part) if r[3]]))
    assert acc.hexdigest() == checksum_of(rs)
    assert acc.count == len(rs)


@settings(deadline=None)  # the first call imports pandas
@given(st.lists(records, min_size=1, max_size=20), st.data())
def test_a_duplicated_or_missing_record_changes_the_checksum(rs: list, data) -> None:
    extra = data.draw(st.sampled_from(rs))
    assert checksum_of([*rs, extra]) != checksum_of(rs)  # a multiset: duplicates count
    assert checksum_of(rs[1:]) != checksum_of(rs)


def test_each_field_counts_and_fields_stay_paired() -> None:
    base = [("t", b"k1", b"v1", ()), ("t", b"k2", b"v2", ())]
    variants = [
        [("t", b"k1", b"v2", ()), ("t", b"k2", b"v1", ())],  # keys swapped between records
        [("u", b"k1", b"v1", ()), ("t", b"k2", b"v2", ())],  # another topic
        [("t", None, b"v1", ()), ("t", b"k2", b"v2", ())],  # no key
        [("t", b"None", b"v1", ()), ("t", b"k2", b"v2", ())],  # the key "None" is not None
        [("t", b"v1", b"k1", ()), ("t", b"k2", b"v2", ())],  # key and value swapped
        [("t", b"k1", b"v1", (("h", b"x"),)), ("t", b"k2", b"v2", ())],  # a header
        [("t", b"k1", b"v1", (("h", None),)), ("t", b"k2", b"v2", ())],  # a null header
    ]
    sums = {checksum_of(v) for v in variants} | {checksum_of(base)}
    assert len(sums) == len(variants) + 1
    # str and bytes of the same UTF-8 text are the same record on the wire.
    assert checksum_of([("t", "k1", "v1", ()), ("t", b"k2", b"v2", ())]) == checksum_of(base)


def test_known_answer() -> None:
    """Pins the construction (pandas' SipHash included): a change here breaks stored handles."""
    assert checksum_of([]) == "m64v1:0000000000000000"
    assert checksum_of([("orders", b"k", b"value", (("h", b"1"),)), ("orders", None, b"x", ())]) \
        == KNOWN


KNOWN = "m64v1:c17c02ba42d3d14c"  # computed once with pandas 3.1 and checked in


def test_mapping_rows_are_strict() -> None:
    assert fields_of({"value": b"v", "key": b"k", "partition": 2}, 0) == (
        b"v", b"k", None, 2, None, 0)
    with pytest.raises(RowError, match=r"row 3 .*unknown field\(s\) \['header'\]"):
        fields_of({"value": b"v", "header": [("a", b"b")]}, 3)
    with pytest.raises(RowError, match="not a \\(str, bytes"):
        fields_of({"value": b"v", "headers": [("a", 5)]}, 0)
    assert Row(b"v").partition is None


_FIRST_USE_IN_THREADS = """
import threading
from twopc.executor.checksum import checksum_of, warm_up

errors = []
def use(i):
    try:
        if i % 2:
            warm_up()
        checksum_of([("t", None, b"v%d" % i, ())])
    except BaseException as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=use, args=(i,)) for i in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(errors)
raise SystemExit(1 if errors else 0)
"""


def test_first_use_from_many_threads_at_once() -> None:
    """The hashing's import (pandas) happens on first use; threads that all start at once (the
    writer's starter thread beside its caller, several writers in one process) must not meet in
    it: CPython raises _DeadlockError when two threads import pandas' cyclic modules together."""
    import subprocess
    import sys

    for _ in range(3):  # a fresh process each time: the import happens once per process
        done = subprocess.run([sys.executable, "-c", _FIRST_USE_IN_THREADS], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
