"""Issue 33, the log's record decoding (twopc/records.py, twopc/handle.py): a stored body is read
back exactly as written or refused with a typed error naming the record and the field; nothing
is coerced (a map is no batch name, 2.5 no producer id, inf no offset). Test first: on the code
before this change 649 of 1,472 substitutions were accepted and some crashed untyped."""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twopc.protocol.handle import Handle, HandleFormatError, PartitionSpan, ResultKind, WriteResult
from twopc.protocol.log_records import (
    Aborted,
    Committed,
    Duplicates,
    Orphans,
    Partial,
    Prepared,
    RecordFormatError,
    Released,
    Resolved,
    RollForward,
    Stranded,
    binding_body,
    binding_from_body,
    from_body,
    to_body,
)
from twopc.protocol.offsets import SourceOffsets
from twopc.protocol.owner import Owner

H = Handle("p-0-1", 4000, 3, (PartitionSpan("t", 0, 10, None, 3, "tid-1"),
                              PartitionSpan("u", 2, 0, 4, 5, None)), 8, "m64v1:ab", 1_700_000_000_000,
           60000, 0, 1, 1_700_000_000_100, "exec-1", 12)
OFFSETS = SourceOffsets("group-1", (("src", 0, 5), ("src", 1, 7)), "p-0-1")

SAMPLES = [
    Prepared("7", (H,)), Prepared("8", (H,), OFFSETS), Committed("7", 12, ("p-1-0",)),
    Committed("9", None, ()), Partial("7", 12, ("p-0-1",), ("p-1-1",)),
    Aborted("7", (H,), "guard", 12), Aborted("7", (H,), "guard", None), Duplicates("7", ("a",)),
    Orphans(("p-2-0",)), RollForward(("p-0-1",)),
    Released(("7",), ("p-0-1",), (("p-0-1", "t", 0),)),
    Stranded((("7", "p-0-1", "why"),), ("p-0-2",)), Resolved("7", "committed", "ops: ticket 1"),
]

# Values that are of no field's type, or out of every field's range.
HOSTILE: list[Any] = [None, True, False, 2.5, math.inf, -math.inf, math.nan, -1, 2**64, -(2**64),
                      "5", b"5", "", [], [1], {}, {"a": 1}, 0]


def _paths(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every leaf and container position in a body, except the kind and version keys."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if path == () and k in ("kind", "v"):
                continue
            yield (*path, k)
            yield from _paths(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield (*path, i)
            yield from _paths(v, (*path, i))


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        obj = obj[p]
    return obj


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = copy.deepcopy(obj)
    target = out
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    return out


def _same_type(a: Any, b: Any) -> bool:
    """Whether `b` could be what a writer put where `a` is (bool is not int, int is not float)."""
    if a is None or b is None:
        return False
    return type(a) is type(b)


def _substitutions() -> Iterator[tuple[dict[str, Any], tuple[Any, ...], Any]]:
    for record in SAMPLES:
        body = to_body(record)
        for path in _paths(body):
            original = _get(body, path)
            for value in HOSTILE:
                if not _same_type(original, value) and not (original is None and value is None):
                    yield body, path, value


def _accepts_differently(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> str | None:
    """None if the substituted body is refused with RecordFormatError (naming the field) or reads
    back as a record that writes exactly that body; else what went wrong."""
    mutated = _set(body, path, value)
    try:
        record = from_body(mutated)
    except RecordFormatError as exc:
        return None if str(exc) else "an empty message"
    except Exception as exc:
        return f"untyped {type(exc).__name__}: {exc}"
    if to_body(record) == mutated:
        return None  # optional field, read exactly (e.g. None where None is allowed)
    return f"accepted as {record!r:.120}"


def test_no_substitution_is_coerced_or_crashes() -> None:
    cases = list(_substitutions())
    problems = [(path, value, why) for body, path, value in cases
                if (why := _accepts_differently(body, path, value)) is not None]
    assert len(cases) > 1000
    assert problems == [], f"{len(problems)} of {len(cases)}: {problems[:10]}"


def test_the_samples_read_back_exactly() -> None:
    for record in SAMPLES:
        assert from_body(to_body(record)) == record


json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=4),
    max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(SAMPLES), st.data())
def test_random_substitutions_only_typed_errors(record: Any, data: st.DataObject) -> None:
    body = to_body(record)
    paths = list(_paths(body))
    path = data.draw(st.sampled_from(paths))
    value = data.draw(json_like)
    mutated = _set(body, path, value)
    try:
        back = from_body(mutated)
    except RecordFormatError as exc:
        assert str(path[-1]) in str(exc) or str(exc), exc
        return
    assert to_body(back) == mutated or _equal_modulo_optional(to_body(back), mutated)


def _equal_modulo_optional(a: Any, b: Any) -> bool:
    """Bodies equal but for a key the reader treats as absent (an optional field holding None)."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = set(a) | set(b)
        return all(_equal_modulo_optional(a.get(k), b.get(k)) for k in keys)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal_modulo_optional(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["kind", "v", "batch", "handles", "intent", "ids",
                                        "losers", "offsets", "held", "partitions"]), json_like))
def test_arbitrary_bodies_only_typed_errors(body: dict[str, Any]) -> None:
    with contextlib.suppress(RecordFormatError):
        from_body(body)


def test_messages_name_the_field_and_what_was_found() -> None:
    body = to_body(Prepared("7", (H,)))
    with pytest.raises(RecordFormatError, match=r"pid.*2\.5|2\.5.*pid"):
        from_body(_set(body, ("handles", 0, "pid"), 2.5))
    with pytest.raises(RecordFormatError, match=r"batch.*dict|batch.*map"):
        from_body(_set(body, ("batch",), {"a": 1}))
    with pytest.raises(RecordFormatError, match=r"first offset|inf"):
        from_body(_set(body, ("handles", 0, "spans", 0, 2), math.inf))
    with pytest.raises(RecordFormatError, match=r"version"):
        from_body({**body, "v": True})


def test_binding_is_read_strictly() -> None:
    good = binding_body(Owner.query("q-1", "p"))
    assert binding_from_body(good) == Owner.query("q-1", "p")
    for key in ("owner_kind", "owner_id", "prefix"):
        for value in HOSTILE:
            if isinstance(value, str) and key != "owner_kind" and value:
                continue
            with pytest.raises(RecordFormatError):
                binding_from_body({**good, key: value})
    with pytest.raises(RecordFormatError):
        binding_from_body({**good, "v": True})


def test_write_results_are_read_strictly() -> None:
    good = WriteResult(ResultKind.PRECOMMITTED, "7", 0, 1, H, 8).to_obj()
    assert WriteResult.from_obj(good) == WriteResult(ResultKind.PRECOMMITTED, "7", 0, 1, H, 8)
    for key in ("batch", "p", "a", "rows"):
        for value in (2.5, math.inf, {}, [], None, "x" if key != "batch" else 3):
            with pytest.raises(HandleFormatError):
                WriteResult.from_obj({**good, key: value})
