"""The input schema of Spark's Kafka sink, checked on the driver, and Arrow batches turned into rows.

Columns: `value` (string or binary, required), `key` (string or binary), `topic` (string; the
`topic` option overrides it, as in Spark's sink), `partition` (int), `headers` (array of
struct<key: string, value: binary or string>). Other columns are ignored, as Spark's own Kafka sink
does.

Design: docs/design.md section 7.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twopc.spark.errors import BadRowError, InputSchemaError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from twopc.executor.rows import Columns, Row

COLUMNS = ("value", "key", "topic", "partition", "headers")


@dataclass(frozen=True)
class InputLayout:
    """Which of the sink's columns the DataFrame has (checked once, on the driver)."""

    has_key: bool
    has_topic: bool
    has_partition: bool
    has_headers: bool


def check_schema(schema: StructType, default_topic: str | None) -> InputLayout:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructType,
    )

    fields = {f.name.lower(): f for f in schema.fields}
    names = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields) or "no columns"

    def bytes_like(name: str) -> None:
        if not isinstance(fields[name].dataType, (StringType, BinaryType)):
            raise InputSchemaError(
                f"column {name} must be string or binary, got {fields[name].dataType.simpleString()}; "
                f"cast it, e.g. col('{name}').cast('string')"
            )

    if "value" not in fields:
        raise InputSchemaError(
            f"the DataFrame has no 'value' column (it has: {names}); the Kafka sink writes the "
            "'value' column (string or binary) of each row, select or alias one"
        )
    bytes_like("value")
    if "key" in fields:
        bytes_like("key")
    if "topic" in fields and not isinstance(fields["topic"].dataType, StringType):
        raise InputSchemaError(
            f"column topic must be a string, got {fields['topic'].dataType.simpleString()}"
        )
    if "topic" not in fields and default_topic is None:
        raise InputSchemaError(
            "no topic: add the option 'topic' or a string column 'topic' naming each row's topic"
        )
    if "partition" in fields and not isinstance(fields["partition"].dataType, IntegerType):
        raise InputSchemaError(
            f"column partition must be an int, got {fields['partition'].dataType.simpleString()}; "
            "cast it with col('partition').cast('int')"
        )
    if "headers" in fields:
        dt = fields["headers"].dataType
        ok = (
            isinstance(dt, ArrayType)
            and isinstance(dt.elementType, StructType)
            and [f.name for f in dt.elementType.fields] == ["key", "value"]
            and isinstance(dt.elementType.fields[0].dataType, StringType)
            and isinstance(dt.elementType.fields[1].dataType, (StringType, BinaryType))
        )
        if not ok:
            raise InputSchemaError(
                f"column headers must be array<struct<key: string, value: binary>>, got "
                f"{dt.simpleString()}"
            )
    return InputLayout("key" in fields, "topic" in fields, "partition" in fields, "headers" in fields)


def _as_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def _find(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    # Spark keeps the DataFrame's column case; match ignoring case as Spark's resolution does.
    for index, field_name in enumerate(batch.schema.names):
        if field_name.lower() == name:
            return batch.column(index)
    return None


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    array = _find(batch, name)
    return None if array is None else array.to_pylist()


def _binary_list(array: pa.Array) -> list[Any]:
    """The column's entries as bytes (None for null): a string column is cast to binary in Arrow
    (the same UTF-8 bytes, no copy), so no `str` is made and encoded per row."""
    import pyarrow as pa

    if pa.types.is_string(array.type):
        array = array.cast(pa.binary())
    elif pa.types.is_large_string(array.type):
        array = array.cast(pa.large_binary())
    return array.to_pylist()  # type: ignore[no-any-return]


def _null_value(task_partition: int, index: int) -> BadRowError:
    return BadRowError(
        f"row {index} of Spark partition {task_partition} has a null value; Kafka records written "
        "by twopc need a value (filter or fill null values before writing)"
    )


def rows_from_batches(
    batches: Iterable[pa.RecordBatch], task_partition: int, default_topic: str | None
) -> Iterator[Row | Columns]:
    """Rows for the writer; a bad row raises BadRowError naming it (the task, its index).

    A batch with only value and key (the common case, with the topic option) becomes one
    `Columns` block: no Python object per row but the key and value bytes themselves."""
    from twopc.executor.rows import Columns

    index = 0
    for batch in batches:
        value_array = _find(batch, "value")
        if value_array is None:
            raise BadRowError("the input has no 'value' column")
        # The topic option overrides the topic column, as in Spark's Kafka sink.
        if (default_topic is not None
                and _find(batch, "partition") is None and _find(batch, "headers") is None):
            if value_array.null_count:
                first_null = value_array.is_null().to_pylist().index(True)
                raise _null_value(task_partition, index + first_null)
            key_array = _find(batch, "key")
            values = _binary_list(value_array)
            keys = None if key_array is None else _binary_list(key_array)
            if values:
                yield Columns(values, keys)
            index += len(values)
            continue
        for row in _rows_of(batch, index, task_partition, default_topic):
            yield row
            index += 1


def _rows_of(
    batch: pa.RecordBatch, start: int, task_partition: int, default_topic: str | None
) -> Iterator[Row]:
    """One `Row` per row: the general path (topic, partition or headers columns)."""
    from twopc.executor.rows import Row

    values = _column(batch, "value")
    assert values is not None
    keys = _column(batch, "key")
    # The topic option overrides the topic column, as in Spark's Kafka sink.
    topics = _column(batch, "topic") if default_topic is None else None
    partitions = _column(batch, "partition")
    headers = _column(batch, "headers")
    for i, raw in enumerate(values):
        where = f"row {start + i} of Spark partition {task_partition}"
        value = _as_bytes(raw)
        if value is None:
            raise _null_value(task_partition, start + i)
        topic = topics[i] if topics is not None and topics[i] is not None else default_topic
        if topic is None:
            raise BadRowError(f"{where} has a null topic and no 'topic' option names one")
        row_headers: tuple[tuple[str, bytes | None], ...] = ()
        if headers is not None and headers[i]:
            row_headers = tuple((str(h["key"]), _as_bytes(h["value"])) for h in headers[i])
        yield Row(
            value=value,
            key=_as_bytes(keys[i]) if keys is not None else None,
            topic=topic,
            partition=partitions[i] if partitions is not None else None,
            headers=row_headers,
        )
