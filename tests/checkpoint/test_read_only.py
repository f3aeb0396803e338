"""open_log(read_only=True): a reader that writes nothing, not even the probe, and creates no
directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from checkpoint import LogNotFound, open_log


def test_missing_local_log_is_not_created(tmp_path: Path) -> None:
    for url in (str(tmp_path / "none"), f"file://{tmp_path / 'none'}"):
        with pytest.raises(LogNotFound, match="does not exist"):
            open_log(url, read_only=True)
    assert not (tmp_path / "none").exists()


def test_reads_without_writing(tmp_path: Path) -> None:
    url = str(tmp_path / "log")
    writer = open_log(url)
    writer.append(0, {"n": 0})
    writer.index.create("k", {"v": 1})
    before = sorted(os.walk(url))
    reader = open_log(url, read_only=True)
    assert [r.body for r in reader.records()] == [{"n": 0}]
    assert reader.index.get("k") == {"v": 1}
    assert sorted(os.walk(url)) == before  # no probe key, nothing else written
