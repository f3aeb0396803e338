"""Requests the control client sent, recorded, and sent again later: a late copy of a request, as
when a connection the client gave up on (a timeout, then a retry elsewhere) still had the request
in the broker's queue. Tests use it to prove that no such copy of an earlier batch's requests can
undo what a later batch did (issue 30, item 6)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from twopc.control import ControlClient
from twopc.control.connection import BrokerConnection
from twopc.control.messages import ApiKey
from twopc.control.protocol import Reader

# What can move a group's offsets or end a transaction.
STATE_CHANGING = frozenset({ApiKey.OFFSET_COMMIT, ApiKey.INIT_PRODUCER_ID,
                            ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.TXN_OFFSET_COMMIT, ApiKey.END_TXN})


@dataclass(frozen=True)
class SentRequest:
    host: str
    port: int
    api: ApiKey
    version: int
    body: bytes


@contextmanager
def recorded() -> Iterator[list[SentRequest]]:
    """Every request any control client of this process sends meanwhile, in order."""
    sent: list[SentRequest] = []
    real = BrokerConnection.request

    async def record(self: BrokerConnection, api: ApiKey, version: int, body: bytes) -> Reader:
        sent.append(SentRequest(self.host, self.port, api, version, body))
        return await real(self, api, version, body)

    BrokerConnection.request = record  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        BrokerConnection.request = real  # type: ignore[method-assign]


def send_again(control: ControlClient, requests: Sequence[SentRequest]) -> None:
    """Send each request again, byte for byte, in order, each on a new connection to the broker
    it first went to (as a copy that arrives late would)."""

    async def once(r: SentRequest) -> None:
        conn = BrokerConnection(r.host, r.port, control._settings)
        await conn.connect()
        try:
            await conn.request(r.api, r.version, r.body)
        finally:
            await conn.close()

    for r in requests:
        control._call(once(r))


def apis(requests: Sequence[SentRequest]) -> list[str]:
    return [r.api.name for r in requests]


def state_changing(requests: Sequence[SentRequest]) -> list[SentRequest]:
    return [r for r in requests if r.api in STATE_CHANGING]


__all__ = ["SentRequest", "apis", "recorded", "send_again", "state_changing"]
