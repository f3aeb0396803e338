"""What the partition leaders say a transaction wrote (twopc/executor/spans.py). Pure: no broker; the
writer's integration tests compare the spans with the log itself."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from twopc.control.errors import ERROR_CODES
from twopc.control.partition_messages import ActiveProducer, ProducerState
from twopc.executor.spans import read_spans

PID, EPOCH = 42, 3
TOPIC_IDS = {"a": "id-a"}


def _ours(first: int, last_seq: int, pid: int = PID, epoch: int = EPOCH) -> ActiveProducer:
    return ActiveProducer(pid, epoch, last_seq, 0, 0, first)


def _state(topic: str, part: int, *producers: ActiveProducer, error: int = 0) -> ProducerState:
    return ProducerState(topic, part, error, None, producers)


def test_each_partition_gives_its_first_offset_and_count() -> None:
    states = {("a", 0): _state("a", 0, _ours(7, 9), _ours(3, 0, pid=5)),
              ("b", 1): _state("b", 1, _ours(0, 0))}
    reading = read_spans([("b", 1), ("a", 0)], states, PID, EPOCH, TOPIC_IDS)
    assert not reading.unreadable and not reading.not_open and reading.record_count == 11
    assert [(s.topic, s.partition, s.first_offset, s.last_offset, s.record_count, s.topic_id)
            for s in reading.spans] == [("a", 0, 7, None, 10, "id-a"), ("b", 1, 0, None, 1, None)]


def test_an_error_or_a_missing_answer_is_unreadable() -> None:
    denied = ERROR_CODES["TOPIC_AUTHORIZATION_FAILED"]
    states = {("a", 0): _state("a", 0, error=denied)}
    reading = read_spans([("a", 0), ("a", 1)], states, PID, EPOCH, TOPIC_IDS)
    assert reading.unreadable == ((("a", 0), "TOPIC_AUTHORIZATION_FAILED"), (("a", 1), "no answer"))
    assert not reading.spans and reading.unreadable


def test_another_epoch_or_no_open_transaction_is_not_ours() -> None:
    states = {("a", 0): _state("a", 0, _ours(5, 4, epoch=EPOCH - 1)),  # a zombie's older epoch
              ("a", 1): _state("a", 1, _ours(-1, 4)),  # ours, but no transaction open there
              ("a", 2): _state("a", 2)}
    reading = read_spans([("a", 0), ("a", 1), ("a", 2)], states, PID, EPOCH, TOPIC_IDS)
    assert reading.not_open == (("a", 0), ("a", 1), ("a", 2)) and reading.record_count == 0


entries = st.one_of(
    st.builds(_ours, st.integers(-1, 10**6), st.integers(-1, 10**4)),
    st.builds(_ours, st.integers(0, 10**6), st.integers(0, 10**4), pid=st.integers(0, 50),
              epoch=st.integers(0, 5)))
partitions = st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 5))


@given(st.dictionaries(partitions, st.tuples(st.lists(entries, max_size=3, unique_by=lambda a: a.producer_id),
                                             st.sampled_from([0, 0, 0, 6, 29]))),
       st.lists(partitions, max_size=12))
def test_every_partition_is_read_or_named(
        answers: dict[tuple[str, int], tuple[list[ActiveProducer], int]],
        asked: list[tuple[str, int]]) -> None:
    states = {tp: _state(*tp, *producers, error=error) for tp, (producers, error) in answers.items()}
    reading = read_spans(asked, states, PID, EPOCH, TOPIC_IDS)
    spans = [(s.topic, s.partition) for s in reading.spans]
    unreadable = [tp for tp, _ in reading.unreadable]
    # Every partition asked lands in exactly one of the three, in order.
    assert sorted(spans + unreadable + list(reading.not_open)) == sorted(set(asked))
    assert spans == sorted(spans)
    for s in reading.spans:  # (a broker lists each producer id once per partition)
        producers, error = answers[(s.topic, s.partition)]
        ours = [p for p in producers if (p.producer_id, p.producer_epoch) == (PID, EPOCH)]
        assert error == 0 and len(ours) == 1
        assert (s.first_offset, s.record_count) == (ours[0].current_txn_start_offset,
                                                    ours[0].last_sequence + 1)
        assert s.first_offset >= 0 and s.record_count >= 1
    for tp in reading.not_open:  # no entry of ours with a transaction open and a record in it
        producers, _ = answers.get(tp, ([], 0))
        assert not any((p.producer_id, p.producer_epoch) == (PID, EPOCH)
                       and p.current_txn_start_offset >= 0 and p.last_sequence >= 0
                       for p in producers)
    for tp in unreadable:
        assert tp not in answers or answers[tp][1] != 0
    assert reading.record_count == sum(s.record_count for s in reading.spans)
