"""Hypothesis strategies for handles and log records (shared by the pure tests)."""

from __future__ import annotations

from hypothesis import strategies as st

from twopc.protocol.handle import Handle, PartitionSpan

tids = st.builds(lambda p, s: f"q-{p}-{s}", st.integers(0, 5), st.integers(0, 2))


@st.composite
def handles(draw: st.DrawFn, partition: int | None = None) -> Handle:
    p = draw(st.integers(0, 5)) if partition is None else partition
    first = draw(st.integers(0, 1000))
    n = draw(st.integers(1, 50))
    start = draw(st.integers(1_000_000, 2_000_000))
    return Handle(
        transactional_id=f"q-{p}-{draw(st.integers(0, 2))}",
        producer_id=draw(st.integers(0, 3)),
        epoch=draw(st.integers(0, 3)),
        spans=(PartitionSpan(draw(st.sampled_from(["a", "b"])), draw(st.integers(0, 3)), first,
                             draw(st.sampled_from([first + n - 1, None])), n, None),),
        record_count=n,
        checksum=draw(st.sampled_from(["c0", "c1", "c2"])),
        start_ms=start,
        timeout_ms=draw(st.integers(1000, 60000)),
        task_partition=p,
        attempt=draw(st.integers(0, 2)),
        writer_clock_ms=start + draw(st.integers(-5000, 5000)),
        writer_host=draw(st.sampled_from([None, "exec-1", "exec-2"])),
        writer_elapsed_ms=draw(st.none() | st.integers(0, 10000)),
    )


@st.composite
def batch_handles(draw: st.DrawFn) -> tuple[Handle, ...]:
    """Handles of one batch: one per Spark partition."""
    parts = draw(st.sets(st.integers(0, 5), max_size=5))
    return tuple(draw(handles(p)) for p in sorted(parts))
