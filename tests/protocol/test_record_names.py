"""Code names may change, stored names never: the log outlives code versions (log_records.py)."""

from __future__ import annotations

from twopc.protocol.log_records import (
    Committed,
    Orphans,
    binding_body,
    from_body,
    to_body,
)
from twopc.protocol.owner import Owner, OwnerKind


def test_committed_orphans_are_stored_under_losers() -> None:
    rec = Committed("7", 3, ("p-0-1", "p-2-0"))
    body = to_body(rec)
    assert body == {"kind": "committed", "v": 1, "batch": "7", "intent": 3,
                    "losers": ["p-0-1", "p-2-0"]}
    assert from_body(body) == rec
    assert to_body(Orphans(("p-1-1",))) == {"kind": "orphans", "v": 1, "ids": ["p-1-1"]}


def test_owner_kinds_are_stored_by_value() -> None:
    assert [k.value for k in OwnerKind] == ["query", "job"]
    body = binding_body(Owner(OwnerKind.JOB, "orders", "p"))
    assert body["owner_kind"] == "job"
