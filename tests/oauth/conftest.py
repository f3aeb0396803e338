"""A real broker whose SASL listener takes OAUTHBEARER, validating JWTs against the JWKS endpoint of
an identity provider the test process serves (twopc/testing/oauth.py).

The broker's `connections.max.reauth.ms` for OAUTHBEARER is short (REAUTH_MS), so that every client
re-authenticates its connections within a test (KIP-368)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from twopc.broker import DEFAULT_VARIANT, LocalKafka
from twopc.testing.brokers import EXTERNAL, requested_variants, start_oauth_kafka
from twopc.testing.oauth import AUDIENCE, IdentityProvider

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
