"""One connection to one broker on an asyncio event loop: TLS, SASL, and pipelined requests.

Requests are written as soon as they are made and matched to responses by correlation id, so many
can be in flight at once on one socket. asyncio's TLS (memory BIOs) keeps reads and writes of one
TLS session on one thread, which blocking ssl sockets shared by a reader and a writer do not.

Design: docs/design.md section 3.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import ssl
import struct
import time

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
from twopc.control.oauth import (
    ERROR_ACK,
    OAuthTokenError,
    initial_response,
    refusal_message,
    server_error,
    token_source,
)
from twopc.control.oauth import MECHANISM as MECHANISM_OAUTHBEARER
from twopc.control.protocol import Reader
from twopc.control.scram import MECHANISMS as SCRAM_MECHANISMS
from twopc.control.scram import ScramClient
from twopc.control.tls import ca_context

_SIZE = struct.Struct(">i")
MAX_FRAME = 256 * 1024 * 1024
SOFTWARE_VERSION = "0.1.0"
# Sessions shorter than this are not renewed: the broker refuses a re-authentication started
# within 1 s of the previous one.
REAUTH_MIN_SESSION_MS = 1500


def ssl_context(settings: ClientSettings) -> ssl.SSLContext:
    """The client's TLS context, from the same settings librdkafka reads: ssl.ca.location (a PEM
    file or a directory of them; `probe` or unset: the system's CAs), ssl.ca.pem, and a client
    certificate (ssl.certificate.location, ssl.key.location, ssl.key.password)."""
    ca = settings.ssl_ca_location if settings.ssl_ca_location != "probe" else None
    try:
        ctx = ca_context(ca, settings.ssl_ca_pem)
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
        # SASL session (KIP-368): its lifetime as the broker gave it, when to re-authenticate.
        self.session_lifetime_ms = 0
        self.authentications = 0
        self._reauth_at: float | None = None  # time.monotonic()
        self._reauth_task: asyncio.Task[None] | None = None

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
        frame = await self._send(ApiKey.API_VERSIONS, version,
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
        """SaslHandshake and the mechanism's SaslAuthenticate rounds; then, if the broker limits
        the session (SaslAuthenticate v1+ `session_lifetime_ms` > 0: `connections.max.reauth.ms`,
        or an OAUTHBEARER token's expiry), when to authenticate again on this connection."""
        s = self._settings
        mech = s.sasl_mechanism
        frame = await self._send(ApiKey.SASL_HANDSHAKE, 1, m.encode_sasl_handshake(1, mech))
        code, offered = m.decode_sasl_handshake(1, frame)
        if code != 0:
            raise AuthenticationError(
                f"broker {self.host}:{self.port} does not accept SASL mechanism {mech} "
                f"({error_name(code)}); it offers {', '.join(offered) or 'none'}")
        if mech == MECHANISM_OAUTHBEARER:
            lifetime_ms = await self._oauthbearer()
        elif mech == "PLAIN":
            user, password = s.sasl_username or "", s.sasl_password or ""
            lifetime_ms = (await self._sasl_round(f"\0{user}\0{password}".encode())).session_lifetime_ms
        elif mech in SCRAM_MECHANISMS:
            scram = ScramClient(mech, s.sasl_username or "", s.sasl_password or "")
            server_first = await self._sasl_round(scram.first())
            server_final = await self._sasl_round(scram.final(server_first.auth_bytes))
            scram.verify(server_final.auth_bytes)
            lifetime_ms = server_final.session_lifetime_ms
        else:
            raise AuthenticationError(f"unsupported SASL mechanism {mech}")
        self.session_lifetime_ms = lifetime_ms
        self.authentications += 1
        self._reauth_at = None
        # The broker refuses a re-authentication within 1 s of the last one (KafkaChannel's
        # MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS); a shorter session is left to expire.
        if lifetime_ms > REAUTH_MIN_SESSION_MS:
            # At 85-95% of the session, as Kafka's Java client does (SaslClientAuthenticator):
            # margin for latency and clock drift, spread so that the pool's connections do not
            # all re-authenticate at once.
            fraction = 0.85 + 0.10 * random.random()
            self._reauth_at = time.monotonic() + fraction * lifetime_ms / 1000.0

    async def _oauthbearer(self) -> int:
        oauth = self._settings.oauth
        assert oauth is not None, "settings_from_config sets oauth for OAUTHBEARER"
        source = token_source(oauth)
        token = await asyncio.get_running_loop().run_in_executor(None, source.token)
        resp = await self._sasl_authenticate(initial_response(token.access_token, token.extensions))
        if resp.error_code != 0:
            source.invalidate(token)
            raise OAuthTokenError(
                f"SASL OAUTHBEARER authentication at {self.host}:{self.port} failed "
                f"({error_name(resp.error_code)}): {resp.error_message or 'no detail'}; the token "
                f"from {oauth.source} is {token.describe()}", oauth.source)
        if resp.auth_bytes:
            # RFC 7628 3.2.2: a JSON error challenge; the client answers a lone ^A and the broker
            # then fails the exchange (SASL_AUTHENTICATION_FAILED, the same JSON as its message).
            status = str(server_error(resp.auth_bytes).get("status", "refused"))
            with contextlib.suppress(ControlError):
                await self._sasl_authenticate(ERROR_ACK)
            source.invalidate(token)
            raise OAuthTokenError(refusal_message(f"{self.host}:{self.port}", status, token, oauth),
                                  oauth.source)
        return resp.session_lifetime_ms

    async def _sasl_authenticate(self, payload: bytes) -> m.SaslAuthenticateResponse:
        version = self.version(ApiKey.SASL_AUTHENTICATE)
        frame = await self._send(ApiKey.SASL_AUTHENTICATE, version,
                                 m.encode_sasl_authenticate(version, payload))
        return m.decode_sasl_authenticate(version, frame)

    async def _sasl_round(self, payload: bytes) -> m.SaslAuthenticateResponse:
        resp = await self._sasl_authenticate(payload)
        if resp.error_code != 0:
            user = self._settings.sasl_username
            raise AuthenticationError(
                f"SASL {self._settings.sasl_mechanism} authentication of user {user!r} at "
                f"{self.host}:{self.port} failed ({error_name(resp.error_code)}): "
                f"{resp.error_message or 'no detail'}; check sasl.username and sasl.password")
        return resp

    @property
    def reauthentication_due(self) -> bool:
        return self._reauth_at is not None and time.monotonic() >= self._reauth_at

    async def _reauthenticate(self) -> None:
        """KIP-368: a new SaslHandshake and SaslAuthenticate on this connection. Requests already
        sent are answered first (the broker reads a connection's requests one at a time, in
        order); new ones wait for this (the broker takes nothing but SaslAuthenticate after the
        handshake until the exchange ends)."""
        task = self._reauth_task
        if task is None:
            task = self._reauth_task = asyncio.get_running_loop().create_task(self._reauth_once())
        try:
            await asyncio.shield(task)
        finally:
            if task.done() and self._reauth_task is task:
                self._reauth_task = None

    async def _reauth_once(self) -> None:
        try:
            await self._authenticate()
        except BaseException as exc:
            failure = exc if isinstance(exc, ControlError) else BrokerConnectionError(
                f"re-authentication at {self.host}:{self.port} failed: {exc}")
            self._fail(failure)
            raise

    async def request(self, api: ApiKey, version: int, body: bytes) -> Reader:
        """Send one request and wait for its response body (pipelined with any others): after a
        re-authentication if the session is due for one (KIP-368). A test may have armed an
        injected fault for it (faults.py; never in production)."""
        if self._reauth_task is not None or self.reauthentication_due:
            await self._reauthenticate()
        fault = faults.pick(api, version, body)
        if fault is None:
            return await self._send(api, version, body)
        return await faults.apply(fault, api, f"{self.host}:{self.port}",
                                  lambda: self._send(api, version, body), self._fail)

    async def _send(self, api: ApiKey, version: int, body: bytes) -> Reader:
        if self._failure is not None:
            raise BrokerConnectionError(f"connection to {self.host}:{self.port} is broken: "
                                        f"{self._failure}")
        if self._writer is None:
            raise BrokerConnectionError(f"connection to {self.host}:{self.port} is not open")
        corr = next(self._ids) & 0x7FFFFFFF
        header = m.request_header(api, version, corr, self._settings.client_id)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes] = loop.create_future()
        self._pending[corr] = (api, version, future)
        if not self._outbox:
            loop.call_soon(self._flush)
        self._outbox.append(_SIZE.pack(len(header) + len(body)) + header + body)
        # A timer per request, not wait_for(shield(...)): those cost two more tasks a request
        # (~30 us of the loop's thread each time, x64 EndTxns and more on a commit's path). A
        # request whose caller is cancelled leaves its future cancelled: its answer is dropped.
        timer = loop.call_later(self._settings.request_timeout_s, self._timed_out, api, future)
        try:
            frame = await future
        finally:
            timer.cancel()
        got_corr, reader = m.response_body(api, version, frame)
        if got_corr != corr:
            raise ProtocolError(f"response correlation id {got_corr} for request {corr}")
        return reader

    def _timed_out(self, api: ApiKey, future: asyncio.Future[bytes]) -> None:
        if future.done():
            return
        future.set_exception(BrokerConnectionError(
            f"{api.name} to {self.host}:{self.port} timed out"))
        # The socket's state is unknown now (a late answer would arrive out of turn): drop it.
        self._fail(BrokerConnectionError(
            f"no answer to {api.name} from {self.host}:{self.port} within "
            f"{self._settings.request_timeout_s:.0f}s"))

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
