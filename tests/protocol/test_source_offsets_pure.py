"""The pure parts of twopc.commitSourceOffsets: Spark's offsets log, the intent's body (versions 1
and 2), the choice of carrier, the broker's refusals, the wire layouts, and the option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twopc.control import group_messages as gm
from twopc.control import messages as m
from twopc.control.errors import ERROR_CODES
from twopc.control.protocol import Reader, Writer
from twopc.protocol.handle import Handle
from twopc.protocol.log_records import Committed, Prepared, RecordFormatError, from_body, to_body
from twopc.protocol.offsets import (
    CarrierAction,
    SourceOffsets,
    SourceOffsetsError,
    carrier_action,
    explain,
    needs_offsets,
    parse_spark_offsets,
    refusals,
)
from twopc.protocol.state import BatchStatus, fold
from twopc.spark.errors import OptionError
from twopc.spark.options import parse_options

topics = st.text(st.sampled_from("abcxyz.-_"), min_size=1, max_size=8)
offset_maps = st.dictionaries(topics, st.dictionaries(st.integers(0, 50), st.integers(0, 2**40),
                                                      min_size=1, max_size=4),
                              min_size=1, max_size=3)


def handle(tid: str, p: int = 0) -> Handle:
    return Handle(tid, 7, 1, (), 0, "", 0, 60000, p, 0, 0)


def spark_file(version: str, sources: list[object]) -> str:
    """An offsets log file as Spark writes it: version, metadata, one line per source."""
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {"a": "b"}})
    lines = []
    for i, s in enumerate(sources):
        body = s if isinstance(s, str) else json.dumps(s)
        lines.append(f"{i}:{body}" if version == "v2" else body)
    return "\n".join([version, meta, *lines])


@given(offset_maps, st.sampled_from(["v1", "v2"]))
def test_kafka_offsets_round_trip(offsets: dict[str, dict[int, int]], version: str) -> None:
    kafka = {t: {str(p): o for p, o in parts.items()} for t, parts in offsets.items()}
    # Other sources (file, rate, none) are passed over.
    text = spark_file(version, [{"logOffset": 3}, kafka, "-", "17"])
    expected = tuple(sorted((t, p, o) for t, parts in offsets.items() for p, o in parts.items()))
    assert parse_spark_offsets(text, "offsets/3") == expected


def test_two_kafka_sources_must_agree() -> None:
    assert parse_spark_offsets(spark_file("v1", [{"a": {"0": 5}}, {"a": {"0": 5}, "b": {"1": 2}}]),
                               "f") == (("a", 0, 5), ("b", 1, 2))
    with pytest.raises(SourceOffsetsError, match="different offsets"):
        parse_spark_offsets(spark_file("v1", [{"a": {"0": 5}}, {"a": {"0": 6}}]), "f")


@pytest.mark.parametrize(("text", "why"), [
    ("", "not a Spark offsets log"),
    ("v3\n{}\n{\"a\": {\"0\": 1}}", "not a Spark offsets log"),
    (spark_file("v1", [{"logOffset": 3}, "-"]), "no offsets of Spark's Kafka source"),
    (spark_file("v1", ["{not json"]), "not JSON"),
    (spark_file("v1", [{"a": {"0": -1}}]), "unresolved offsets"),
])
def test_unreadable_offsets_name_the_file(text: str, why: str) -> None:
    with pytest.raises(SourceOffsetsError, match=why) as info:
        parse_spark_offsets(text, "chk/offsets/4")
    assert "chk/offsets/4" in str(info.value)


@given(offset_maps, st.one_of(st.none(), topics))
def test_source_offsets_round_trip(offsets: dict[str, dict[int, int]], carrier: str | None) -> None:
    found = SourceOffsets("g", tuple(sorted((t, p, o) for t, parts in offsets.items()
                                           for p, o in parts.items())), carrier)
    assert SourceOffsets.from_obj(found.to_obj()) == found
    assert found.as_dict() == {(t, p): o for t, parts in offsets.items() for p, o in parts.items()}


def test_source_offsets_refuse_what_a_group_cannot_hold() -> None:
    with pytest.raises(ValueError, match="twice"):
        SourceOffsets("g", (("a", 0, 1), ("a", 0, 2)))
    with pytest.raises(ValueError, match="cannot be committed"):
        SourceOffsets("g", (("a", 0, -1),))
    with pytest.raises(ValueError, match="group"):
        SourceOffsets("", ())


def test_prepared_bodies_old_and_new() -> None:
    h = (handle("p-0-0"), handle("p-1-0", 1))
    offsets = SourceOffsets("g", (("src", 0, 9),), "p-1-0")
    with_offsets = to_body(Prepared("3", h, offsets))
    assert with_offsets["v"] == 2 and from_body(with_offsets) == Prepared("3", h, offsets)
    # Without offsets the body stays version 1: logs of queries without the option read as before,
    # also by code that does not know the option.
    plain = to_body(Prepared("3", h))
    assert plain["v"] == 1 and "offsets" not in plain and from_body(plain) == Prepared("3", h)
    old = {"kind": "prepared", "batch": "3", "v": 1, "handles": [x.to_obj() for x in h]}
    assert from_body(old) == Prepared("3", h, None)
    for bad in ({**with_offsets, "kind": "committed"}, {**with_offsets, "offsets": None},
                {**plain, "v": 3}):
        with pytest.raises(RecordFormatError):
            from_body(bad)


def test_the_intent_offsets_are_in_the_folded_state() -> None:
    offsets = SourceOffsets("g", (("src", 0, 9),))
    state = fold([(0, Prepared("0", (), offsets)), (1, Committed("0", 0, ()))])
    assert state.batch("0").status is BatchStatus.COMMITTED
    assert state.batch("0").offsets == offsets and state.batch("0").intent == ()


def test_a_repair_without_offsets_keeps_those_its_visible_part_carried() -> None:
    from twopc.protocol.log_records import Partial

    offsets = SourceOffsets("g", (("src", 0, 9),), "b")
    a, b = handle("a", 0), handle("b", 1)
    records = [(0, Prepared("0", (a, b), offsets)), (1, Partial("0", 0, ("b",), ("a",))),
               (2, Prepared("0", (handle("a2", 0),))), (3, Committed("0", 2, ()))]
    state = fold(records).batch("0")
    assert state.status is BatchStatus.COMMITTED and state.offsets == offsets
    assert fold([(0, Prepared("1", (a,)))]).batch("1").offsets is None


def test_a_repair_carries_the_offsets_unless_an_old_carrier_did() -> None:
    recorded = SourceOffsets("g", (("s", 0, 1),), "c")
    # A partly visible batch's re-run carries them again unless its visible part did.
    assert needs_offsets(recorded, ["a", "b"]) and not needs_offsets(recorded, ["c"])
    assert needs_offsets(None, ["c"])


def test_refusals_say_what_to_do() -> None:
    codes = {("s", 0): 0, ("s", 1): ERROR_CODES["UNKNOWN_TOPIC_OR_PARTITION"]}
    [why] = refusals(codes, [("s", 0, 1), ("s", 1, 1)], "g")
    assert "s-1" in why and "same name" in why
    assert refusals({}, [("s", 0, 1)], "g") == ["s-0: no answer"]
    assert "active members" in explain(ERROR_CODES["UNKNOWN_MEMBER_ID"], "g", "x")
    assert "READ on group 'g'" in explain(ERROR_CODES["GROUP_AUTHORIZATION_FAILED"], "g", "x")
    assert "fenced or aborted" in explain(ERROR_CODES["PRODUCER_FENCED"], "g", "x")


# ---- wire layouts -----------------------------------------------------------------------------


def test_add_offsets_to_txn_layout() -> None:
    r = Reader(gm.encode_add_offsets_to_txn(3, "tx", 42, 5, "grp"), True)
    assert (r.string(), r.int64(), r.int16(), r.string()) == ("tx", 42, 5, "grp")
    r.tags()
    assert r.remaining == 0
    assert gm.decode_add_offsets_to_txn(3, Reader(Writer(True).int32(0).int16(47).tags()
                                                  .getvalue(), True)) == 47


def _read_offset_topics(r: Reader) -> list[tuple[str, int, int]]:
    out: list[tuple[str, int, int]] = []

    def topic(t: Reader) -> None:
        name = t.string()

        def part(p: Reader) -> None:
            index, offset, epoch, meta = p.int32(), p.int64(), p.int32(), p.nullable_string()
            assert (epoch, meta) == (-1, None)
            p.tags()
            out.append((name, index, offset))

        t.array(part)
        t.tags()

    r.array(topic)
    r.tags()
    return out


def test_txn_offset_commit_layout() -> None:
    offsets = [("b", 1, 30), ("a", 2, 10), ("a", 0, 20)]
    r = Reader(gm.encode_txn_offset_commit(4, "tx", "grp", 42, 5, offsets), True)
    assert (r.string(), r.string(), r.int64(), r.int16()) == ("tx", "grp", 42, 5)
    assert (r.int32(), r.string(), r.nullable_string()) == (-1, "", None)  # no member
    assert _read_offset_topics(r) == sorted(offsets)
    assert r.remaining == 0
    with pytest.raises(ValueError, match="transaction-version-2"):
        gm.encode_txn_offset_commit(5, "tx", "grp", 42, 5, offsets)


def _answer(codes: list[tuple[str, int, int]]) -> bytes:
    def part(w: Writer, c: tuple[str, int, int]) -> None:
        w.int32(c[1]).int16(c[2]).tags()

    def topic(w: Writer, name: str) -> None:
        w.string(name).array([c for c in codes if c[0] == name], part).tags()

    names = sorted({c[0] for c in codes})
    return Writer(True).int32(0).array(names, topic).tags().getvalue()


def test_offset_commit_layouts_and_answers() -> None:
    r = Reader(gm.encode_offset_commit(8, "grp", [("a", 0, 7)]), True)
    assert (r.string(), r.int32(), r.string(), r.nullable_string()) == ("grp", -1, "", None)
    assert _read_offset_topics(r) == [("a", 0, 7)]
    raw = _answer([("a", 0, 0), ("a", 1, 3), ("b", 0, 0)])
    expected = {("a", 0): 0, ("a", 1): 3, ("b", 0): 0}
    assert gm.decode_offset_commit(8, Reader(raw, True)) == expected
    assert gm.decode_txn_offset_commit(4, Reader(raw, True)) == expected


def test_offset_fetch_layout_and_answer() -> None:
    r = Reader(gm.encode_offset_fetch(7, "grp", [("b", 1), ("a", 3), ("a", 0)], True), True)
    assert r.string() == "grp"
    assert r.array(lambda t: (t.string(), t.array(Reader.int32), t.tags())[:2]) == [
        ("a", [0, 3]), ("b", [1])]
    assert r.bool() is True
    everything = Reader(gm.encode_offset_fetch(7, "grp", None, False), True)
    assert everything.string() == "grp" and everything.nullable_array(Reader.string) is None

    def part(w: Writer, p: tuple[int, int, int]) -> None:
        w.int32(p[0]).int64(p[1]).int32(-1).string(None).int16(p[2]).tags()

    def topic(w: Writer, _: int) -> None:
        w.string("a").array([(0, 12, 0), (3, -1, 88)], part).tags()

    raw = Writer(True).int32(0).array([0], topic).int16(0).tags().getvalue()
    answer = gm.decode_offset_fetch(7, Reader(raw, True))
    assert answer.error_code == 0
    assert answer.partitions == {("a", 0): gm.FetchedOffset(12, 0),
                                 ("a", 3): gm.FetchedOffset(-1, 88)}


def test_group_coordinators_are_found_by_key_type_0() -> None:
    r = Reader(m.encode_find_coordinator(4, ["grp"], m.COORDINATOR_KEY_GROUP), True)
    assert r.int8() == 0 and r.array(Reader.string) == ["grp"]


@pytest.mark.parametrize(("api", "ceiling"), [(m.ApiKey.TXN_OFFSET_COMMIT, 4),
                                              (m.ApiKey.ADD_OFFSETS_TO_TXN, 4)])
def test_offsets_in_transactions_stay_on_the_old_protocol(api: m.ApiKey, ceiling: int) -> None:
    # A 4.x broker offers TxnOffsetCommit v5 (transaction-version-2 clients only).
    assert m.negotiate(api, (0, 5)) == ceiling


# ---- the option --------------------------------------------------------------------------------

BASE = {"kafka.bootstrap.servers": "b:9092", "twopc.checkpoint": "file:///tmp/x",
        "twopc.transactionalidprefix": "p"}


def test_the_option_names_a_group_for_streaming_queries() -> None:
    config = parse_options({**BASE, "twopc.commitsourceoffsets": " mirror-g "}, streaming=True)
    assert config.source_offsets_group == "mirror-g"
    assert parse_options(BASE, streaming=True).source_offsets_group is None
    with pytest.raises(OptionError, match="streaming queries"):
        parse_options({**BASE, "twopc.commitsourceoffsets": "g"}, streaming=False)
    with pytest.raises(OptionError, match="is empty"):
        parse_options({**BASE, "twopc.commitsourceoffsets": " "}, streaming=True)


def test_spark_offsets_file_is_read_from_the_checkpoint(tmp_path: Path) -> None:
    from twopc.spark.offsets_log import batch_source_offsets, spark_checkpoint_file

    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "5").write_text(spark_file("v1", [{"s": {"1": 4, "0": 3}}]))
    options = {**BASE, "twopc.commitsourceoffsets": "g", "checkpointlocation": str(tmp_path)}
    config = parse_options(options, streaming=True)
    assert batch_source_offsets(config, "5") == SourceOffsets("g", (("s", 0, 3), ("s", 1, 4)))
    with pytest.raises(SourceOffsetsError, match="offsets/6"):
        batch_source_offsets(config, "6")
    assert batch_source_offsets(parse_options(BASE, streaming=True), "5") is None
    assert spark_checkpoint_file("s3a://b/c/", "offsets", "1") == "s3://b/c/offsets/1"


@given(st.lists(st.sampled_from(["committed", "aborted", "undecided", "unknown", "wait",
                                 "roll_forward"]), max_size=5))
def test_the_carrier_commits_only_after_every_other_transaction_is_proven_committed(
        others: list[str]) -> None:
    """Issue 30, item 2: the group moves past the batch's source records only with all of them."""
    from twopc.protocol.verdicts import Fate

    fates = [Fate(f) for f in others]
    action = carrier_action(fates)
    if Fate.ABORTED in fates:
        assert action is CarrierAction.FENCE
    elif all(f is Fate.COMMITTED for f in fates):
        assert action is CarrierAction.COMMIT
    else:
        assert action is CarrierAction.WAIT
