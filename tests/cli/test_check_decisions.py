"""The pure decisions of `twopc check` (twopc/ops/preflight.py) and the TLS advice both clients give
(twopc/control/config.py): no broker."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twopc.control.config import tls_failure_advice
from twopc.ops.preflight import Status, in_sync_replicas, kip939, producer_acks


@pytest.mark.parametrize(("config", "status"), [
    ({}, Status.OK), ({"acks": "all"}, Status.OK), ({"acks": "-1"}, Status.OK),
    ({"request.required.acks": "all"}, Status.OK), ({"acks": "1"}, Status.FAIL),
    ({"acks": "0"}, Status.FAIL), ({"request.required.acks": "1"}, Status.FAIL),
])
def test_producer_acks(config: dict[str, str], status: Status) -> None:
    item = producer_acks(config)
    assert item.status is status, item
    assert item.detail.startswith("acks=all") is (status is Status.OK)
    if status is Status.FAIL:
        assert "remove" in item.fix and next(iter(config)) in item.fix


partition = st.tuples(st.integers(0, 50), st.integers(-1, 3), st.integers(1, 5),
                      st.integers(0, 5)).filter(lambda p: p[3] <= p[2])


@given(st.lists(partition, min_size=1, max_size=8, unique_by=lambda p: p[0]), st.integers(1, 3))
def test_in_sync_replicas(partitions: list[tuple[int, int, int, int]], min_isr: int) -> None:
    item = in_sync_replicas("in-sync replicas", "t", partitions, min_isr)
    unwritable = any(leader < 0 or isr < min_isr for _, leader, _, isr in partitions)
    lagging = any(isr < rf for _, _, rf, isr in partitions)
    expected = Status.FAIL if unwritable else Status.WARN if lagging else Status.OK
    assert item.status is expected, (partitions, min_isr, item)
    assert bool(item.fix) is (expected is not Status.OK)
    if expected is Status.FAIL:
        assert "NOT_ENOUGH_REPLICAS" in item.fix


def test_in_sync_replicas_names_the_partitions() -> None:
    below = in_sync_replicas("x", "orders", [(0, 1, 3, 3), (1, 2, 3, 1), (2, -1, 3, 0)], 2)
    assert below.status is Status.FAIL
    assert "orders[2] has no leader" in below.detail and "orders[1] has 1 in-sync" in below.detail
    lagging = in_sync_replicas("x", "orders", [(0, 1, 3, 3), (1, 2, 3, 2)], 2)
    assert lagging.status is Status.WARN and "orders[1] 2 of 3" in lagging.detail


def test_kip939_is_reported_either_way() -> None:
    assert kip939(5).status is kip939(6).status is Status.OK
    assert kip939(5).detail.startswith("not offered") and "up to v5" in kip939(5).detail
    assert kip939(6).detail.startswith("offered") and "does not use it" in kip939(6).detail


@pytest.mark.parametrize(("reason", "config", "needle"), [
    ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer "
     "certificate", {"ssl.ca.location": "/x/ca.pem"},
     "not signed by a CA this client trusts (the CA in ssl.ca.location=/x/ca.pem)"),
    ("SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker "
     "certificate could not be verified", {}, "the system's default CAs"),
    ("certificate verify failed: self-signed certificate in certificate chain",
     {"ssl.ca.pem": "-----BEGIN"}, "the CA given in ssl.ca.pem"),
    ("Hostname mismatch, certificate is not valid for 'kafka-1'", {},
     "ssl.endpoint.identification.algorithm=none"),
    ("IP address mismatch, certificate is not valid for '10.0.0.1'", {}, "subject alternative"),
    ("certificate verify failed: certificate has expired", {}, "renew it"),
    ("[SSL: SSLV3_ALERT_BAD_CERTIFICATE] sslv3 alert bad certificate", {},
     "requires a client certificate: set ssl.certificate.location"),
    ("[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required", {},
     "requires a client certificate"),
    ("sslv3 alert bad certificate", {"ssl.certificate.location": "/c.pem"},
     "refused this client's certificate"),
    ("[SSL: WRONG_VERSION_NUMBER] wrong version number", {}, "did not answer TLS"),
    ("something else entirely", {}, "check the ssl.* settings"),
])
def test_tls_failure_advice(reason: str, config: dict[str, str], needle: str) -> None:
    assert needle in tls_failure_advice(reason, config)
