"""Fixtures for the checkpoint tests: a fresh log URL on local files and on a local S3 server.

The S3 server is moto's, run single-threaded on a free 127.0.0.1 port. moto's own
ThreadedMotoServer serves requests on parallel threads, and its If-None-Match check and the write
that follows are not one atomic step there, so two racing creates could both succeed in the test
server (never on AWS). One request at a time makes the server's conditional create atomic.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ckpt_support import BUCKET, S3Server, Target
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import WSGIRequestHandler, make_server


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return None


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server("127.0.0.1", 0, app, threaded=False, request_handler=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    s3 = S3Server(f"http://127.0.0.1:{server.server_port}")
    s3.client().create_bucket(Bucket=BUCKET)
    yield s3
    server.shutdown()
    thread.join(timeout=10)


@pytest.fixture(params=["file", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """A fresh, empty log location on each backend the suite runs on."""
    if request.param == "file":
        root = tmp_path / "log"
        return Target("file", f"file://{root}", {}, local_root=root)
    s3: S3Server = request.getfixturevalue("s3_server")
    prefix = f"log-{uuid.uuid4().hex}"
    return Target("s3", f"s3://{BUCKET}/{prefix}", s3.storage_options(), s3=s3, s3_prefix=prefix)
