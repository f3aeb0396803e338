"""One connection to one broker on an asyncio event loop: TLS, SASL, and pipelined requests.

Requests are written as soon as they are made and matched to responses by correlation id, so many
can be in flight at once on one socket. asyncio's TLS (memory BIOs) keeps reads and writes of one
TLS session on one thread, which blocking ssl sockets shared by a reader and a writer do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import ssl
import struct

from twopc.control import faults
from twopc.control import messages as m
from twopc.control.config import ClientSettings, tls_failure_advice
from twopc.control.errors import (
    AuthenticationError,
    BrokerConnectionError,
    ControlError,
    ProtocolError,
    TlsError,
    error_name,
)
from twopc.control.messages import ApiKey
from twopc.control.protocol import Reader
from twopc.control.scram import MECHANISMS as SCRAM_MECHANISMS
from twopc.control.scram import ScramClient

_SIZE = struct.Struct(">i")
MAX_FRAME = 256 * 1024 * 1024
SOFTWARE_VERSION = "0.1.0"


def ssl_context(settings: ClientSettings) -> ssl.SSLContext:
    """The client's TLS context, from the same settings librdkafka reads: ssl.ca.location (a PEM
    file or a directory of them; `probe` or unset: the system's CAs), ssl.ca.pem, and a client
    certificate (ssl.certificate.location, ssl.key.location, ssl.key.password)."""
    ca = settings.ssl_ca_location if settings.ssl_ca_location != "probe" else None
    try:
        ctx = ssl.create_default_context(
            cafile=ca if ca and not os.path.isdir(ca) else None,
            capath=ca if ca and os.path.isdir(ca) else None, cadata=settings.ssl_ca_pem)
    except (OSError, ssl.SSLError, ValueError) as exc:
        given = f"ssl.ca.location={ca}" if ca else "ssl.ca.pem"
        raise TlsError(f"cannot load the CA certificates of {given}: {exc}; give the PEM file of "
                       "the CA that signed the brokers' certificates") from exc
    if settings.ssl_certificate_location:
        try:
            ctx.load_cert_chain(settings.ssl_certificate_location, settings.ssl_key_location,
                                settings.ssl_key_password)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(
                f"cannot load the client certificate ssl.certificate.location="
                f"{settings.ssl_certificate_location} with ssl.key.location="
                f"{settings.ssl_key_location}: {exc}; give PEM files of a certificate and its key, "
                "and ssl.key.password if the key is encrypted") from exc
    ctx.check_hostname = settings.ssl_check_hostname and settings.ssl_verify
    if not settings.ssl_verify:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class BrokerConnection:
    def __init__(self, host: str, port: int, settings: ClientSettings,
                 node_id: int | None = None) -> None:
        self.host, self.port, self.node_id = host, port, node_id
        self._settings = settings
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[ApiKey, int, asyncio.Future[bytes]]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        # Until the first answers arrived, a TLS error is the handshake's (a broker that wants a
        # client certificate says so only after TLS 1.3's handshake): TlsError, not retried.
        self._established = False
        self._outbox: list[bytes] = []  # frames of this turn of the loop, not yet written
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.finalized_features: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}, node {self.node_id})"

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def alive(self) -> bool:
        return self._writer is not None and self._failure is None

    async def connect(self) -> None:
        s = self._settings
        context = ssl_context(s) if s.uses_ssl else None
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=context,
                                        server_hostname=self.host if context else None),
                s.connect_timeout_s)
        except ssl.SSLError as exc:
            raise self._tls_error(exc) from exc
        except (OSError, asyncio.TimeoutError) as exc:
            why = str(exc) or (f"no answer within {s.connect_timeout_s:g} s "
                               "(socket.connection.setup.timeout.ms)"
                               if isinstance(exc, asyncio.TimeoutError) else type(exc).__name__)
            raise BrokerConnectionError(
                f"cannot connect to broker {self.host}:{self.port}: {why}; check the address "
                "and port, and that a broker listens there") from exc
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())
        try:
            await self._negotiate()
            if s.uses_sasl:
                await self._authenticate()
        except BaseException:
            await self.close()
            raise
        self._established = True

    def _tls_error(self, exc: ssl.SSLError) -> TlsError:
        s = self._settings
        reason = getattr(exc, "verify_message", None) or exc.reason or str(exc)
        advice = tls_failure_advice(f"{exc} {reason}", {
            "ssl.ca.location": s.ssl_ca_location, "ssl.ca.pem": s.ssl_ca_pem,
            "ssl.certificate.location": s.ssl_certificate_location})
        return TlsError(f"TLS handshake with broker {self.host}:{self.port} failed ({reason}): "
                        f"{advice}", advice)

    async def _negotiate(self) -> None:
        version = m.CLIENT_VERSIONS[ApiKey.API_VERSIONS][1]
        frame = await self.request(ApiKey.API_VERSIONS, version,
                                   m.encode_api_versions(version, SOFTWARE_VERSION))
        resp = m.decode_api_versions(version, frame)
        if resp.error_code != 0:
            raise BrokerConnectionError(
                f"broker {self.host}:{self.port} refused ApiVersions v{version}: "
                f"{error_name(resp.error_code)}; twopc needs Apache Kafka 3.6 or newer")
        self.api_versions = resp.versions
        self.finalized_features = resp.finalized_features

    def version(self, api: ApiKey, ceiling: int | None = None) -> int:
        return m.negotiate(api, self.api_versions.get(int(api)), ceiling)

    async def _authenticate(self) -> None:
        s = self._settings
        mech = s.sasl_mechanism
        frame = await self.request(ApiKey.SASL_HANDSHAKE, 1, m.encode_sasl_handshake(1, mech))
        code, offered = m.decode_sasl_handshake(1, frame)
        if code != 0:
            raise AuthenticationError(
                f"broker {self.host}:{self.port} does not accept SASL mechanism {mech} "
                f"({error_name(code)}); it offers {', '.join(offered) or 'none'}")
        user, password = s.sasl_username or "", s.sasl_password or ""
        if mech == "PLAIN":
            await self._sasl_round(f"\0{user}\0{password}".encode())
            return
        if mech not in SCRAM_MECHANISMS:
            raise AuthenticationError(f"unsupported SASL mechanism {mech}")
        scram = ScramClient(mech, user, password)
        server_first = await self._sasl_round(scram.first())
        server_final = await self._sasl_round(scram.final(server_first))
        scram.verify(server_final)

    async def _sasl_round(self, payload: bytes) -> bytes:
        version = self.version(ApiKey.SASL_AUTHENTICATE)
        frame = await self.request(ApiKey.SASL_AUTHENTICATE, version,
                                   m.encode_sasl_authenticate(version, payload))
        resp = m.decode_sasl_authenticate(version, frame)
        if resp.error_code != 0:
            user = self._settings.sasl_username
            raise AuthenticationError(
                f"SASL {self._settings.sasl_mechanism} authentication of user {user!r} at "
                f"{self.host}:{self.port} failed ({error_name(resp.error_code)}): "
                f"{resp.error_message or 'no detail'}; check sasl.username and sasl.password")
        return resp.auth_bytes

    async def request(self, api: ApiKey, version: int, body: bytes) -> Reader:
        """Send one request and wait for its response body (pipelined with any others). A test
        may have armed an injected fault for it (faults.py; never in production)."""
        fault = faults.pick(api, version, body)
        if fault is None:
            return await self._request(api, version, body)
        return await faults.apply(fault, api, f"{self.host}:{self.port}",
                                  lambda: self._request(api, version, body), self._fail)

    async def _request(self, api: ApiKey, version: int, body: bytes) -> Reader:
        if self._failure is not None:
            raise BrokerConnectionError(f"connection to {self.host}:{self.port} is broken: "
                                        f"{self._failure}")
        if self._writer is None:
            raise BrokerConnectionError(f"connection to {self.host}:{self.port} is not open")
        corr = next(self._ids) & 0x7FFFFFFF
        header = m.request_header(api, version, corr, self._settings.client_id)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[corr] = (api, version, future)
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append(_SIZE.pack(len(header) + len(body)) + header + body)
        try:
            frame = await asyncio.wait_for(asyncio.shield(future), self._settings.request_timeout_s)
        except asyncio.TimeoutError as exc:
            # The socket's state is unknown now (a late answer would arrive out of turn): drop it.
            self._fail(BrokerConnectionError(
                f"no answer to {api.name} from {self.host}:{self.port} within "
                f"{self._settings.request_timeout_s:.0f}s"))
            raise BrokerConnectionError(
                f"{api.name} to {self.host}:{self.port} timed out") from exc
        got_corr, reader = m.response_body(api, version, frame)
        if got_corr != corr:
            raise ProtocolError(f"response correlation id {got_corr} for request {corr}")
        return reader

    def _flush(self) -> None:
        # The requests made in one turn of the loop (a batch of EndTxn spread over the pool's
        # connections) leave in one write each: one system call instead of one per request.
        # A connection that failed meanwhile has failed their futures already (_fail).
        frames, self._outbox = self._outbox, []
        if self._writer is not None and self._failure is None:
            self._writer.write(b"".join(frames))

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                size = _SIZE.unpack(await self._reader.readexactly(4))[0]
                if not 4 <= size <= MAX_FRAME:
                    raise ProtocolError(f"response frame of {size} bytes from {self.host}")
                frame = await self._reader.readexactly(size)
                corr = _SIZE.unpack_from(frame)[0]
                entry = self._pending.pop(corr, None)
                if entry is None:
                    raise ProtocolError(f"response with unknown correlation id {corr}")
                if not entry[2].done():
                    entry[2].set_result(frame)
        except asyncio.CancelledError:
            self._fail(BrokerConnectionError(f"connection to {self.host}:{self.port} closed"))
            raise
        except ssl.SSLError as exc:
            self._fail(self._tls_error(exc) if not self._established else BrokerConnectionError(
                f"connection to broker {self.host}:{self.port} lost: {exc}"))
        except (OSError, asyncio.IncompleteReadError, ControlError) as exc:
            self._fail(BrokerConnectionError(
                f"connection to broker {self.host}:{self.port} lost: {exc or type(exc).__name__}"))

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        pending, self._pending = self._pending, {}
        for _, _, future in pending.values():
            if not future.done():
                future.set_exception(exc)
        if self._writer is not None:
            self._writer.close()

    async def close(self) -> None:
        task, self._reader_task = self._reader_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._fail(BrokerConnectionError(f"connection to {self.host}:{self.port} closed"))
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._writer.wait_closed(), 1.0)
