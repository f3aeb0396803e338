"""Fixtures for the checkpoint tests: a fresh log URL on local files and on the local S3 server
(`s3_server` in tests/conftest.py: moto, single-threaded, see testing/twopc_testing/s3.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from ckpt_support import BUCKET, S3Server, Target


@pytest.fixture(scope="session")
def s3_bucket(s3_server: S3Server) -> str:
    s3_server.create_bucket(BUCKET)
    return BUCKET


@pytest.fixture(params=["file", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """A fresh, empty log location on each backend the suite runs on."""
    if request.param == "file":
        root = tmp_path / "log"
        return Target("file", f"file://{root}", {}, local_root=root)
    s3: S3Server = request.getfixturevalue("s3_server")
    request.getfixturevalue("s3_bucket")
    prefix = f"log-{uuid.uuid4().hex}"
    return Target("s3", f"s3://{BUCKET}/{prefix}", s3.storage_options(), s3=s3, s3_prefix=prefix)
