"""A real broker whose SASL listener takes OAUTHBEARER, validating JWTs against the JWKS endpoint of
an identity provider the test process serves (testing/twopc_testing/oauth.py).

The broker's `connections.max.reauth.ms` for OAUTHBEARER is short (REAUTH_MS), so that every client
re-authenticates its connections within a test (KIP-368)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from twopc_testing.oauth import AUDIENCE, IdentityProvider
from twopc_testing.secured import start_oauth_kafka

from twopc.broker import DEFAULT_VARIANT, LocalKafka
from twopc.broker.under_test import EXTERNAL, requested_variants

REAUTH_MS = 3000


@pytest.fixture(scope="session")
def idp() -> Iterator[IdentityProvider]:
    with IdentityProvider() as provider:
        yield provider


@pytest.fixture(scope="session")
def oauth_kafka(idp: IdentityProvider) -> Iterator[LocalKafka]:
    variants = requested_variants(False)
    variant = DEFAULT_VARIANT if variants == [EXTERNAL] else variants[0]
    kafka = start_oauth_kafka(variant, idp.jwks_url, audience=AUDIENCE, issuer=idp.issuer,
                              max_reauth_ms=REAUTH_MS)
    yield kafka
    kafka.stop()
