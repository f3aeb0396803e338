"""Test helper: drive transactional ids' producer epochs to the edge of exhaustion, fast.

Each InitProducerId on an idle transactional id (Empty, CompleteCommit, CompleteAbort) raises its
epoch by exactly one; nothing in the protocol skips ahead (an expected producer id and epoch only
allow that same +1, or a retry that bumps nothing: `TransactionMetadata.prepareIncrementProducerEpoch`).
Once the epoch is exhausted (>= Short.MaxValue - 1 = 32766, `TransactionMetadata.isEpochExhausted`),
the next InitProducerId gives the id a new producer id at epoch 0 (`prepareProducerIdRotation`).
So reaching the edge takes one request per epoch, each appended to `__transaction_state`.

The ControlClient's `fence` costs about 3.6 ms a call (its loop thread, coordinator lookup); a
blocking socket straight to the coordinator costs 0.4-0.8 ms (32,766 calls: 13 s on kafka4-tv2,
17 s on kafka4-tv0, 24 s on kafka3.9, on the 2-core test machine). One id's requests cannot overlap
(a second one meets CONCURRENT_TRANSACTIONS); several ids are driven at once, one socket each.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from twopc.control import messages as m
from twopc.control import txn_messages as tm
from twopc.control.errors import ERROR_CODES, error_name
from twopc.control.messages import ApiKey
from twopc.control.protocol import Reader

EPOCH_MAX = 32767  # Short.MaxValue: only the coordinator's own fence reaches it
EXHAUSTED = EPOCH_MAX - 1  # 32766: the last epoch a client is given; the next init rotates
_INIT_VERSION = 4  # offered by every broker under test (3.9: 0-5, 4.3: 0-6)
_FIND_VERSION = 4
_RETRY_SAME = {ERROR_CODES[n] for n in ("CONCURRENT_TRANSACTIONS", "COORDINATOR_LOAD_IN_PROGRESS")}
_FIND_AGAIN = {ERROR_CODES[n] for n in ("NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE")}
_SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class Driven:
    """Where a driven id stands: the producer id and epoch of its last InitProducerId answer."""

    transactional_id: str
    producer_id: int
    epoch: int
    calls: int
    seconds: float


class _Socket:
    """One blocking connection, one request at a time."""

    def __init__(self, host: str, port: int) -> None:
        self._sock = socket.create_connection((host, port), timeout=30)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._corr = 0

    def call(self, api: ApiKey, version: int, body: bytes) -> Reader:
        self._corr += 1
        header = m.request_header(api, version, self._corr, "twopc-epoch-driver")
        self._sock.sendall(_SIZE.pack(len(header) + len(body)) + header + body)
        (size,) = _SIZE.unpack(self._read(4))
        corr, reader = m.response_body(api, version, self._read(size))
        if corr != self._corr:
            raise RuntimeError(f"correlation id {corr}, expected {self._corr}")
        return reader

    def _read(self, n: int) -> bytes:
        data = self._sock.recv(n, socket.MSG_WAITALL)
        if len(data) != n:
            raise ConnectionError("the broker closed the connection")
        return data

    def close(self) -> None:
        self._sock.close()


def _coordinator(bootstrap: str, tid: str, deadline: float) -> tuple[str, int]:
    """The id's transaction coordinator (FindCoordinator also creates __transaction_state)."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    conn = _Socket(host, int(port))
    try:
        while True:
            reader = conn.call(ApiKey.FIND_COORDINATOR, _FIND_VERSION,
                               m.encode_find_coordinator(_FIND_VERSION, [tid]))
            [found] = m.decode_find_coordinator(_FIND_VERSION, reader, [tid])
            if found.error_code == 0:
                return found.host, found.port
            if time.monotonic() > deadline:
                raise TimeoutError(f"FindCoordinator {tid!r}: {error_name(found.error_code)}")
            time.sleep(0.1)
    finally:
        conn.close()


def drive_one(bootstrap: str, tid: str, epoch: int, timeout_ms: int = 60000,
              limit_s: float = 300.0) -> Driven:
    """InitProducerId on `tid` until its answer carries `epoch`, on the producer id it has.

    The id must be idle (no transaction open: each init would abort it) and below `epoch`."""
    if not 0 <= epoch <= EXHAUSTED:
        raise ValueError(f"a client is never given epoch {epoch}")
    first: list[int] = []

    def done(pid: int, got: int) -> bool:
        if not first:
            first.append(pid)
            if got > epoch:
                raise ValueError(f"{tid!r} is past epoch {epoch} already (at {got})")
        elif pid != first[0]:
            raise RuntimeError(f"{tid!r} rotated to producer id {pid} before epoch {epoch}")
        return got == epoch

    return _init_until(bootstrap, tid, done, timeout_ms, limit_s)


def rotate(bootstrap: str, tid: str, producer_id: int, timeout_ms: int = 60000,
           limit_s: float = 300.0) -> Driven:
    """InitProducerId on the idle `tid` until it answers another producer id than `producer_id`:
    across the rotation (one call from epoch 32766, up to 32,767 from epoch 0)."""
    return _init_until(bootstrap, tid, lambda pid, _: pid != producer_id, timeout_ms, limit_s)


def _init_until(bootstrap: str, tid: str, done: Callable[[int, int], bool], timeout_ms: int,
                limit_s: float) -> Driven:
    began = time.monotonic()
    deadline = began + limit_s
    conn = _Socket(*_coordinator(bootstrap, tid, deadline))
    calls = 0
    try:
        while True:
            body = tm.encode_init_producer_id(_INIT_VERSION, tid, timeout_ms)
            answer = tm.decode_init_producer_id(
                _INIT_VERSION, conn.call(ApiKey.INIT_PRODUCER_ID, _INIT_VERSION, body))
            calls += 1
            if time.monotonic() > deadline:
                raise TimeoutError(f"{tid!r}: not there in {limit_s:.0f} s ({calls} calls, last "
                                   f"answer {answer})")
            if answer.error_code in _RETRY_SAME:
                time.sleep(0.02)
                continue
            if answer.error_code in _FIND_AGAIN:
                conn.close()
                time.sleep(0.1)
                conn = _Socket(*_coordinator(bootstrap, tid, deadline))
                continue
            if answer.error_code != 0:
                raise RuntimeError(f"InitProducerId {tid!r}: {error_name(answer.error_code)}")
            if done(answer.producer_id, answer.producer_epoch):
                return Driven(tid, answer.producer_id, answer.producer_epoch, calls,
                              time.monotonic() - began)
    finally:
        conn.close()


def drive_epochs(bootstrap: str, ids: Sequence[str], epoch: int,
                 timeout_ms: int = 60000) -> dict[str, Driven]:
    """`drive_one` for each id, all at once (one socket and thread each)."""
    unique = list(dict.fromkeys(ids))
    with ThreadPoolExecutor(max_workers=max(1, len(unique))) as pool:
        futures = {tid: pool.submit(drive_one, bootstrap, tid, epoch, timeout_ms)
                   for tid in unique}
        return {tid: f.result() for tid, f in futures.items()}
