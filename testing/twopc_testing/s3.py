"""A local S3-compatible server for tests: moto's S3, served one request at a time.

    with LocalS3() as s3:            # http://127.0.0.1:<free port>
        s3.create_bucket("b")
        open_log("s3://b/log", s3.storage_options())

moto's own ThreadedMotoServer serves requests on parallel threads, and its If-None-Match check and the
write that follows are not one atomic step there, so two racing conditional creates could both succeed
in the test server (never on AWS). One request at a time makes the server's conditional create atomic,
which the checkpoint log's fence (docs/checkpoint.md) relies on. The server runs on a thread of the
process that starts it; Spark's executors and driver-side workers reach it over HTTP like any client.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

# The credentials moto accepts; any non-empty pair would do.
ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    """Where a local S3 server answers, and how to reach it (fsspec/s3fs options, boto3)."""

    endpoint: str

    def storage_options(self) -> dict[str, Any]:
        """s3fs options (fsspec's storage_options) for this server."""
        return {
            "key": ACCESS_KEY,
            "secret": SECRET_KEY,
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": REGION},
        }

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION)

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)


class LocalS3:
    """moto's S3 on a free 127.0.0.1 port, single-threaded (see the module doc)."""

    def __init__(self) -> None:
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.server: S3Server | None = None

    def start(self) -> S3Server:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import WSGIRequestHandler, make_server

        class QuietHandler(WSGIRequestHandler):
            def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
                return None

        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server("127.0.0.1", 0, app, threaded=False, request_handler=QuietHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-s3", daemon=True)
        self._thread.start()
        self.server = S3Server(f"http://127.0.0.1:{self._server.server_port}")
        return self.server

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
