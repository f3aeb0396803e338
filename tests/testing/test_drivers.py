"""The test sources' files: whole, and in the order a Spark file source takes them."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from twopc.testing.drivers import write_json_files


def test_files_are_whole_and_later_files_are_newer(tmp_path: Path) -> None:
    ids = write_json_files(tmp_path, files=5, per_file=3, tag="t")
    ids += write_json_files(tmp_path, files=2, per_file=3, tag="t", first=5)
    files = sorted(tmp_path.glob("f*.json"))
    assert [f.name for f in files] == [f"f{i:03d}.json" for i in range(7)]
    assert not list(tmp_path.glob(".*.tmp"))
    # Spark orders by modification time in milliseconds: each file strictly after the one before.
    mtimes_ms = [f.stat().st_mtime_ns // 1_000_000 for f in files]
    assert all(a < b for a, b in itertools.pairwise(mtimes_ms)), mtimes_ms
    read = [json.loads(line)["value"] for f in files for line in f.read_text().splitlines()]
    assert read == ids and len(set(ids)) == 21 and ids[3] == "t-1-0"
