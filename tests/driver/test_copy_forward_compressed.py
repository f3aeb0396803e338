"""Copy-forward from a compressed topic, end to end on the real broker (issue 31 B).

The topics store every batch compressed (`compression.type`: the broker recompresses whatever the
producer sent), so the copy reads the aborted transaction's records back out of compressed batches
(twopc/control/record_decode.py, with the codecs of a kept library), verifies count and checksum,
and writes them again: every original record exactly once, with its key, headers and timestamp,
and none of the re-run's other rows. Every codec's read-back alone is in
tests/control/test_readback.py; here one codec runs in the default suite, the others with `slow`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.driver.support import Scenario
from tests.driver.test_copy_forward import (
    assert_records_exact,
    decided_then_timed_out,
    driver,
    rerun_with_other_rows,
)
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient

pytestmark = pytest.mark.integration

CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # a record batch's attributes, bits 0-2


@pytest.mark.parametrize("codec", ["zstd", pytest.param("gzip", marks=pytest.mark.slow),
                                   pytest.param("snappy", marks=pytest.mark.slow),
                                   pytest.param("lz4", marks=pytest.mark.slow)])
def test_a_batch_lost_on_a_compressed_topic_is_copied_exactly(
        codec: str, broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path,
        control: ControlClient) -> None:
    config = {"compression.type": codec}
    scenario = Scenario(broker, (make_topic(2, config=config), make_topic(2, config=config)),
                        str(tmp_path / "twopc-log"))
    results = decided_then_timed_out(scenario, control, (1, 2, 3))
    # Stored compressed, or this test would prove nothing about the codec.
    lost = next(r.handle for r in results if r.handle is not None and r.handle.task_partition == 3)
    span = lost.spans[0]
    check = control.log_check(span.topic, span.partition, span.first_offset, lost.producer_id,
                              lost.epoch)
    assert check.probe is not None and check.probe.first_batch is not None, check.describe()
    assert check.probe.first_batch.compression == CODEC_IDS[codec], check.describe()
    report = driver(scenario, control).commit("0", rerun_with_other_rows(scenario))
    assert report.status == "copied" and len(report.committed) == 3, report
    scenario.expect("0")
    scenario.audit()
    assert_records_exact(scenario)
