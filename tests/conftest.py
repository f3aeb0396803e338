"""Fixtures shared by every test: the real Kafka under test and fresh topics.

Broker variants (`kafka4-tv2` default, `kafka4-tv0`, `kafka3.9`) run one after another, never at once:
the `broker` fixture is session-scoped and parametrized, and pytest groups tests by its parameter, tearing
one broker down before it starts the next.

- default: every test on `kafka4-tv2`, plus tests marked `all_variants` on every variant;
- `TWOPC_MATRIX=full` (the full matrix, `make`-free: see README): every test on every variant;
- `TWOPC_BROKER_VARIANTS=kafka3.9,...` picks variants; `TWOPC_BOOTSTRAP_SERVERS` uses an existing cluster.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest
from hypothesis import settings
from twopc_testing.oauth import REAUTH_MS, IdentityProvider
from twopc_testing.s3 import LocalS3, S3Server
from twopc_testing.secured import start_oauth_kafka, start_secured_kafka

from tests.driver.support import Scenario
from twopc.broker import DEFAULT_VARIANT, LocalKafka
from twopc.broker.under_test import EXTERNAL, KafkaUnderTest, requested_variants, start_kafka
from twopc.control import ControlClient
from twopc.crashpoints import TEST_HOOKS_VALUE, TEST_HOOKS_VAR

# Hypothesis' per-example deadline is a timing assertion: on a loaded 2-core machine a slow example
# fails a test whose logic holds. Examples are bounded by their count, not by the clock.
settings.register_profile("twopc", deadline=None)
settings.load_profile("twopc")

_startup_times: list[tuple[str, float]] = []

# twopc's test hooks (TWOPC_CRASH_AT, TWOPC_PAUSE_AT, TWOPC_CLOCK_SKEW_MS) act only with this gate
# set too (checkpoint/crash.py): every process the tests start inherits it from here.
os.environ[TEST_HOOKS_VAR] = TEST_HOOKS_VALUE


def _full_matrix() -> bool:
    return os.environ.get("TWOPC_MATRIX", "") == "full"


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    # A run stopped by SIGTERM (a `timeout`, a cancelled job) tears its fixtures down as Ctrl-C
    # does, so the brokers they started stop with it (else they ran on: found after a timed-out
    # run; tests/test_interrupted_run.py).
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupted)
    config.addinivalue_line("markers", "all_variants: also run on every broker variant by default")
    config.addinivalue_line(
        "markers",
        "only_variants(*names): the scenario exists only on these variants (never run, not skipped, "
        "elsewhere)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "broker" in metafunc.fixturenames:
        every = _full_matrix() or metafunc.definition.get_closest_marker("all_variants") is not None
        variants = requested_variants(every)
        only = metafunc.definition.get_closest_marker("only_variants")
        if only is not None and variants != [EXTERNAL]:
            variants = [v for v in variants if v in only.args] or [only.args[0]]
        metafunc.parametrize("broker", variants, indirect=True, scope="session", ids=variants)
    if "tls_kafka" in metafunc.fixturenames:
        variants = requested_variants(_full_matrix())
        metafunc.parametrize("tls_kafka", variants, indirect=True, scope="session",
                             ids=[f"tls-{v}" for v in variants])
    if "oauth_kafka" in metafunc.fixturenames:
        # Our own broker even with TWOPC_BOOTSTRAP_SERVERS: it needs the test identity provider.
        variants = [DEFAULT_VARIANT if v == EXTERNAL else v
                    for v in requested_variants(_full_matrix())]
        metafunc.parametrize("oauth_kafka", variants, indirect=True, scope="session",
                             ids=[f"oauth-{v}" for v in variants])


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest) -> Iterator[KafkaUnderTest]:
    """A real Kafka (see module doc); its start-up time is printed in the test summary."""
    under_test = start_kafka(request.param)
    if under_test.startup_seconds is not None:
        _startup_times.append((under_test.variant, under_test.startup_seconds))
    yield under_test
    under_test.stop()


@pytest.fixture(scope="session")
def tls_kafka(request: pytest.FixtureRequest) -> Iterator[LocalKafka]:
    """A broker of its own with SSL (mutual TLS) and SASL_SSL listeners, certificates made at start
    (twopc/broker/tls.py); client settings: twopc_testing.secured.secured_configs."""
    kafka = start_secured_kafka(request.param)
    if kafka.startup_seconds is not None:
        _startup_times.append((f"{request.param} with TLS", kafka.startup_seconds))
    yield kafka
    kafka.stop()


@pytest.fixture(scope="session")
def idp() -> Iterator[IdentityProvider]:
    """A test OAuth identity provider in this process: JWKS and client-credentials endpoints
    (testing/twopc_testing/oauth.py)."""
    with IdentityProvider() as provider:
        yield provider


@pytest.fixture(scope="session")
def oauth_kafka(request: pytest.FixtureRequest, idp: IdentityProvider) -> Iterator[LocalKafka]:
    """A broker of its own for OAUTHBEARER: its SASL_PLAINTEXT listener checks JWTs against the
    `idp` fixture's keys (audience and issuer too) and takes PLAIN and SCRAM for user alice, every
    session bounded by connections.max.reauth.ms=REAUTH_MS (so that clients re-authenticate
    within a test, KIP-368); its SASL_SSL listener takes unsigned tokens (Kafka's unsecured
    validator) and bounds sessions only by the token's expiry. Client settings:
    twopc_testing.secured.oauth_config."""
    kafka = start_oauth_kafka(request.param, idp.jwks_url, audience=idp.audience,
                              issuer=idp.issuer, max_reauth_ms=REAUTH_MS, tls=True, users=True)
    if kafka.startup_seconds is not None:
        _startup_times.append((f"{request.param} with OAuth", kafka.startup_seconds))
    yield kafka
    kafka.stop()


@pytest.fixture
def make_topic(broker: KafkaUnderTest) -> Callable[..., str]:
    """Create a fresh, uniquely named topic: `make_topic(partitions=4, config={...})`."""
    return broker.create_topic


@pytest.fixture
def control(broker: KafkaUnderTest) -> Iterator[ControlClient]:
    """twopc's control client on the Kafka under test."""
    client = ControlClient(broker.config())
    yield client
    client.close()


@pytest.fixture
def scenario(broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path) -> Scenario:
    """A fresh query: two 2-partition topics and its own checkpoint log on local files."""
    return Scenario(broker, (make_topic(2), make_topic(2)), str(tmp_path / "twopc-log"))


@pytest.fixture
def topic(broker: KafkaUnderTest) -> str:
    """A fresh 4-partition topic."""
    return broker.create_topic(4)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A local S3-compatible server (moto, one request at a time: testing/twopc_testing/s3.py)."""
    with LocalS3() as server:
        yield server


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _startup_times:
        terminalreporter.section("Kafka broker start-up (measured, not asserted)")
        for variant, seconds in _startup_times:
            terminalreporter.write_line(f"{variant}: {seconds:.1f} s")
