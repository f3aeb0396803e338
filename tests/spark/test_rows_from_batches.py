"""Arrow batches to the writer's rows (no Spark, no broker): the columnar path and the general one
give the same records and the same checksum, and a null value is named by its row."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twopc.executor.checksum import checksum_of
from twopc.executor.rows import Columns, Row
from twopc.spark.errors import BadRowError
from twopc.spark.schema import rows_from_batches

TOPIC = "t"


def _records(items: list[Row | Columns]) -> list[tuple[str, bytes | None, bytes]]:
    out: list[tuple[str, bytes | None, bytes]] = []
    for item in items:
        if isinstance(item, Columns):
            keys = item.keys if item.keys is not None else [None] * len(item)
            out.extend((TOPIC, k, v) for v, k in zip(item.values, keys, strict=True))
        else:
            out.append((item.topic or TOPIC, item.key, item.value))
    return out


texts = st.text(max_size=12)
rows = st.lists(st.tuples(texts, st.none() | texts), max_size=30)


@settings(deadline=None, max_examples=60)
@given(st.lists(rows, min_size=1, max_size=4), st.sampled_from(["string", "large_string",
                                                                "binary"]))
def test_columns_carry_the_same_records_as_rows(batches: list[list[tuple[str, str | None]]],
                                                kind: str) -> None:
    arrow_type = {"string": pa.string(), "large_string": pa.large_string(),
                  "binary": pa.binary()}[kind]

    def cell(text: str | None) -> Any:
        return None if text is None or kind != "binary" else text.encode()

    def column(texts: list[str | None]) -> pa.Array:
        return pa.array([t if kind != "binary" else cell(t) for t in texts], type=arrow_type)

    plain = [pa.RecordBatch.from_arrays([column([v for v, _ in b]), column([k for _, k in b])],
                                        names=["Value", "key"]) for b in batches]
    # The same rows with a topic column and no topic option take the general path (a Row each).
    general = [batch.append_column("topic", pa.array([TOPIC] * batch.num_rows, pa.string()))
               for batch in plain]
    columnar = list(rows_from_batches(plain, 0, TOPIC))
    one_by_one = list(rows_from_batches(general, 0, None))
    assert all(isinstance(item, Columns) and len(item) for item in columnar)
    assert all(isinstance(item, Row) for item in one_by_one)
    expected = [(TOPIC, None if k is None else k.encode(), v.encode()) for b in batches
                for v, k in b]
    assert _records(columnar) == _records(one_by_one) == expected
    assert (checksum_of((t, k, v, ()) for t, k, v in _records(columnar))
            == checksum_of((t, k, v, ()) for t, k, v in expected))


@pytest.mark.parametrize("with_topic", [False, True], ids=["columnar", "general"])
def test_a_null_value_is_named_by_its_row_in_the_task(with_topic: bool) -> None:
    first = pa.record_batch([pa.array(["a", "b", "c"])], names=["value"])
    second = pa.record_batch([pa.array(["d", None, "f"])], names=["value"])
    batches = [first, second]
    if with_topic:
        batches = [b.append_column("topic", pa.array([TOPIC] * 3)) for b in batches]
    with pytest.raises(BadRowError, match="row 4 of Spark partition 7 has a null value"):
        list(rows_from_batches(batches, 7, None if with_topic else TOPIC))


def test_empty_batches_yield_nothing() -> None:
    empty = pa.record_batch([pa.array([], pa.string())], names=["value"])
    assert list(rows_from_batches([empty, empty], 0, TOPIC)) == []


def test_the_topic_option_overrides_the_topic_column() -> None:
    """As in Spark's Kafka sink (tests/spark/test_sink_parity.py compares the two): with the topic
    option, every row goes to it, whatever its topic column says; without it, each row's topic
    column names its topic, and a null one is an error naming the row."""
    batch = pa.record_batch([pa.array(["a", "b"]), pa.array(["x", None]), pa.array([1, None],
                                                                                  pa.int32())],
                            names=["value", "topic", "partition"])
    rows = list(rows_from_batches([batch], 0, "option"))
    assert [(r.topic, r.value, r.partition) for r in rows if isinstance(r, Row)] == [
        ("option", b"a", 1), ("option", b"b", None)]
    plain = batch.select(["value", "topic"])
    assert [len(c) for c in rows_from_batches([plain], 0, "option")
            if isinstance(c, Columns)] == [2]  # the columnar path: the column is not read
    with pytest.raises(BadRowError, match="row 1 of Spark partition 3 has a null topic"):
        list(rows_from_batches([batch], 3, None))
