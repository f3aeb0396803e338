from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.core.support import Scenario
from twopc.control import ControlClient
from twopc.testing.brokers import KafkaUnderTest


@pytest.fixture
def control(broker: KafkaUnderTest) -> Iterator[ControlClient]:
    client = ControlClient(broker.config())
    yield client
    client.close()


@pytest.fixture
def scenario(broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path) -> Scenario:
    """A fresh query: two 2-partition topics and its own checkpoint log on local files."""
    return Scenario(broker, (make_topic(2), make_topic(2)), str(tmp_path / "twopc-log"))
