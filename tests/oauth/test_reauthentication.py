"""KIP-368 re-authentication of twopc's control client, against the OAuth broker's SASL_PLAINTEXT
listener, whose sessions last connections.max.reauth.ms=REAUTH_MS (3 s) for every mechanism:
OAUTHBEARER (a fresh token), PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.

- A batch of EndTxn in flight when a re-authentication starts: the broker answers a connection's
  requests one at a time, in order, so the SaslHandshake waits behind the EndTxns; every EndTxn is
  answered on the same connection, the transactions are committed, and requests after it go on.
- Commit batches through the public API across several sessions, with the pool's connections:
  every transaction committed, no connection replaced (a session that lapsed would have made the
  broker close it), each re-authenticated.
- A long-lived connection (PLAIN and SCRAM; OAUTHBEARER in test_control_oauth.py) keeps
  working across sessions.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from twopc_testing.oauth import PROVIDER, REAUTH_MS, IdentityProvider
from twopc_testing.secured import TLS_PASSWORD, TLS_USER, oauth_config

from twopc.broker import LocalKafka
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, EndTxnRequest, TxnState
from twopc.control import txn_messages as tm
from twopc.control.connection import BrokerConnection
from twopc.control.messages import ApiKey
from twopc.control.outcomes import OutcomeKind
from twopc.control.transactions import END_TXN_MAX_VERSION
from twopc.executor.rows import Row
from twopc.executor.writer import write_partition
from twopc.ops.audit import audit_topic
from twopc.protocol.handle import Handle

pytestmark = pytest.mark.integration

MECHANISMS = ("OAUTHBEARER", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _config(kafka: LocalKafka, idp: IdentityProvider, mechanism: str, **extra: str
            ) -> dict[str, str]:
    if mechanism == "OAUTHBEARER":
        return oauth_config(kafka, **{"twopc.oauth.token.provider": PROVIDER,
                                      "sasl.oauthbearer.config": idp.provider_config()}, **extra)
    return {"bootstrap.servers": kafka.sasl_bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": TLS_USER, "sasl.password": TLS_PASSWORD, **extra}


def _open_transactions(kafka: LocalKafka, topic: str, count: int) -> tuple[list[Handle], list[str]]:
    """`count` pre-committed transactions (written over PLAINTEXT: the control client is tested)."""
    prefix = f"reauth{uuid.uuid4().hex[:6]}"
    handles, ids = [], []
    with ControlClient({"bootstrap.servers": kafka.bootstrap_servers}) as plain:
        for i in range(count):
            values = [f"{prefix}-{i}-{j}" for j in range(5)]
            result = write_partition({"bootstrap.servers": kafka.bootstrap_servers},
                                     f"{prefix}-{i}-0", [Row(v.encode()) for v in values],
                                     batch="0", task_partition=i, attempt=0, default_topic=topic,
                                     transaction_timeout_ms=120000, control=plain)
            assert result.handle is not None
            handles.append(result.handle)
            ids += values
    return handles, ids


def _connections(control: ControlClient) -> list[BrokerConnection]:
    return [c for pool in control._cluster._pools.values() for c in pool]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_endtxn_in_flight_while_the_connection_reauthenticates(
        oauth_kafka: LocalKafka, idp: IdentityProvider, mechanism: str) -> None:
    topic = KafkaUnderTest("reauth", oauth_kafka.bootstrap_servers, local=oauth_kafka).create_topic(2)
    handles, ids = _open_transactions(oauth_kafka, topic, 6)
    config = _config(oauth_kafka, idp, mechanism,
                     **{"twopc.control.connections.per.broker": "1"})
    with ControlClient(config) as control:
        (node,) = set(control.coordinators([h.transactional_id for h in handles]).values())

        async def batch_across_a_reauthentication() -> tuple[list[int], int, int]:
            conn = await control._cluster.connection(node)
            before = conn.authentications
            version = conn.version(ApiKey.END_TXN, END_TXN_MAX_VERSION)
            sent = [asyncio.ensure_future(conn.request(ApiKey.END_TXN, version, tm.encode_end_txn(
                version, h.transactional_id, h.producer_id, h.epoch, True))) for h in handles]
            while conn.in_flight < len(handles):  # written, none answered yet
                await asyncio.sleep(0)
            in_flight = conn.in_flight
            conn._reauth_at = time.monotonic()  # due: the next request re-authenticates first
            version_list = conn.version(ApiKey.LIST_TRANSACTIONS, 0)
            after = conn.request(ApiKey.LIST_TRANSACTIONS, version_list,
                                 tm.encode_list_transactions(version_list, []))
            codes = [tm.decode_end_txn(version, r) for r in await asyncio.gather(*sent)]
            await after
            assert await control._cluster.connection(node) is conn and conn.alive
            return codes, in_flight, conn.authentications - before

        codes, in_flight, reauths = control._call(batch_across_a_reauthentication())
        assert in_flight >= len(handles)
        assert codes == [0] * len(handles), codes
        assert reauths == 1
        described = control.describe_transactions([h.transactional_id for h in handles])
        # The coordinator may still be writing the markers (PrepareCommit): committed either way.
        assert all(d.state.committing for d in described.values()), described
    audit = audit_topic({"bootstrap.servers": oauth_kafka.bootstrap_servers}, topic, ids)
    assert audit.passed and audit.records == len(ids), audit.summary()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_commit_batches_across_sessions_keep_their_connections(
        oauth_kafka: LocalKafka, idp: IdentityProvider, mechanism: str) -> None:
    topic = KafkaUnderTest("reauth", oauth_kafka.bootstrap_servers, local=oauth_kafka).create_topic(2)
    rounds, per_round = 4, 3
    handles, ids = _open_transactions(oauth_kafka, topic, rounds * per_round)
    with ControlClient(_config(oauth_kafka, idp, mechanism)) as control:
        control.list_transactions("reauth")
        began = time.monotonic()
        for r in range(rounds):
            batch = handles[r * per_round:(r + 1) * per_round]
            outcomes = control.end_txns([EndTxnRequest(h.transactional_id, h.producer_id,
                                                       h.epoch, True) for h in batch])
            assert {o.kind for o in outcomes.values()} == {OutcomeKind.COMMITTED}, outcomes
            if r == 0:
                first = set(_connections(control))
            # Spread over more than two sessions of REAUTH_MS.
            time.sleep(max(0.0, (r + 1) * REAUTH_MS / 1000 * 0.8 - (time.monotonic() - began)))
        conns = _connections(control)
        assert first <= set(conns) and all(c.alive for c in conns)
        assert max(c.authentications for c in conns) >= 2, [c.authentications for c in conns]
        assert all(0 < c.session_lifetime_ms <= REAUTH_MS for c in conns)
    audit = audit_topic({"bootstrap.servers": oauth_kafka.bootstrap_servers}, topic, ids)
    assert audit.passed and audit.records == len(ids), audit.summary()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_long_lived_plain_or_scram_connection_reauthenticates(
        oauth_kafka: LocalKafka, idp: IdentityProvider, mechanism: str) -> None:
    with ControlClient(_config(oauth_kafka, idp, mechanism)) as control:
        control.list_transactions("reauth-plain")
        (conn,) = _connections(control)
        assert 0 < conn.session_lifetime_ms <= REAUTH_MS
        deadline = time.monotonic() + 2.5 * REAUTH_MS / 1000
        while time.monotonic() < deadline:
            # Past a session the broker would close the connection at the next request that is
            # not a SaslHandshake: every one here succeeds on the same connection.
            control.list_transactions("reauth-plain", states=[TxnState.ONGOING])
            time.sleep(0.4)
        time.sleep(REAUTH_MS / 1000 * 1.1)  # idle past a whole session, then a request
        control.list_transactions("reauth-plain")
        assert _connections(control) == [conn] and conn.alive
        assert conn.authentications >= 3, conn.authentications
