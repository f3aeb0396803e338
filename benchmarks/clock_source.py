"""`twopc_bench_clock`: a streaming source whose rows exist from the moment they are created.

Spark's `rate` source offers a second's rows only once that second is over (its offsets are whole
seconds), so each of its rows waits about half a second before any trigger can see it, whatever the
trigger: latency that a Kafka source would not add. Here row `i` is created at
`startMs + i * 1000 / rowsPerSecond` and is offered by the first `latestOffset()` at or after that
instant, as a record produced to Kafka would be. Benchmarks only.

Options: `startMs` (epoch ms, required: every driver-side worker must agree on it),
`rowsPerSecond`, `numPartitions`. Columns: `id` (long), `created_ms` (long, epoch ms).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

NAME = "twopc_bench_clock"


@dataclass
class IdRange(InputPartition):
    first: int
    end: int  # exclusive


class ClockReader(DataSourceStreamReader):
    def __init__(self, start_ms: int, rate: int, partitions: int) -> None:
        self.start_ms = start_ms
        self.rate = rate
        self.parts = partitions

    def _created(self, row: int) -> int:
        return self.start_ms + row * 1000 // self.rate

    def initialOffset(self) -> dict[str, int]:
        return {"id": 0}

    def latestOffset(self, start: dict[str, int], limit: object) -> dict[str, int]:
        # Everything created so far (the default read limit: all available).
        now_ms = time.time_ns() // 1_000_000
        return {"id": max(0, (now_ms - self.start_ms) * self.rate // 1000)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        first, last = int(start["id"]), int(end["id"])
        step = -(-(last - first) // self.parts) if last > first else 0
        if step == 0:
            return []
        return [IdRange(lo, min(lo + step, last)) for lo in range(first, last, step)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int]]:
        assert isinstance(partition, IdRange)
        for row in range(partition.first, partition.end):
            yield row, self._created(row)

    def commit(self, end: dict[str, int]) -> None:
        pass


class ClockSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return "id long, created_ms long"

    def streamReader(self, schema: object) -> ClockReader:
        return ClockReader(int(self.options["startms"]), int(self.options.get("rowspersecond", 1000)),
                           int(self.options.get("numpartitions", 2)))
