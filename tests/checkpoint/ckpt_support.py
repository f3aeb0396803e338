"""Helpers shared by the checkpoint tests (a uniquely named module: tests/ has no packages)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from twopc_testing.s3 import S3Server

from checkpoint import Log, open_log

BUCKET = "twopc-checkpoint-tests"


@dataclass(frozen=True)
class Target:
    """Where a test's log lives: its URL, fsspec options, and how to reach its files raw."""

    backend: str
    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    local_root: Path | None = None
    s3: S3Server | None = None
    s3_prefix: str = ""

    def open(self) -> Log:
        return open_log(self.url, self.storage_options)

    def read_raw(self, key: str) -> bytes | None:
        if self.local_root is not None:
            path = self.local_root / key
            return path.read_bytes() if path.exists() else None
        assert self.s3 is not None
        try:
            answer = self.s3.client().get_object(Bucket=BUCKET, Key=f"{self.s3_prefix}/{key}")
        except self.s3.client().exceptions.NoSuchKey:
            return None
        data: bytes = answer["Body"].read()
        return data

    def write_raw(self, key: str, data: bytes) -> None:
        if self.local_root is not None:
            (self.local_root / key).write_bytes(data)
            return
        assert self.s3 is not None
        self.s3.client().put_object(Bucket=BUCKET, Key=f"{self.s3_prefix}/{key}", Body=data)

    def delete_raw(self, key: str) -> None:
        if self.local_root is not None:
            (self.local_root / key).unlink()
            return
        assert self.s3 is not None
        self.s3.client().delete_object(Bucket=BUCKET, Key=f"{self.s3_prefix}/{key}")


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20,
)
bodies = st.dictionaries(st.text(), values, max_size=8)
