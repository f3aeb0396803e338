"""Review of issue 30 item 6 (offsets-only batches): a driver paused between its intent and the
offsets' own transaction wakes after another driver settled that intent and committed the next
batch (with its offsets in the carrier). The paused driver's commit_alone starts a NEW
transaction (InitProducerId bumps the epoch: no recorded epoch binds it), so nothing fences it:
it commits the older batch's offsets and moves the group BACK, before its next append loses."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from tests.driver.support import Scenario, finish, started_driver
from tests.driver.test_recovery import _wait_paused, _wake
from tests.driver.test_source_offsets import ends, group_offsets
from twopc.control import ControlClient
from twopc.protocol.handle import ResultKind, WriteResult

pytestmark = pytest.mark.integration


def test_paused_driver_of_an_offsets_only_batch_never_moves_the_group_back(
        scenario: Scenario, control: ControlClient, make_topic: Callable[..., str]) -> None:
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    empty = [WriteResult(ResultKind.EMPTY, "0", p, 0) for p in range(scenario.partitions)]
    old_offsets = ends(group, source, 6, 2)
    call = {"log": scenario.log_url, "bootstrap": scenario.broker.bootstrap_servers,
            "owner_id": scenario.owner_id, "prefix": scenario.prefix, "action": "commit",
            "batch": "0", "results": [r.to_obj() for r in empty],
            "offsets": old_offsets.to_obj()}
    env = {"TWOPC_PAUSE_AT": "coordinator.after_intent",
           "TWOPC_PAUSE_UNTIL": scenario.log_url + ".wake"}
    with started_driver(call, env) as old:
        _wait_paused(old)
        b = scenario.driver(control)
        b.recover()  # settles A's intent: commits (6, 2) in the offsets' own transaction
        assert group_offsets(scenario, group, source) == {(source, 0): 6, (source, 1): 2}
        assert b.commit("1", scenario.write("1"), ends(group, source, 20, 9)).status == "committed"
        scenario.expect("1")
        assert group_offsets(scenario, group, source) == {(source, 0): 20, (source, 1): 9}
        _wake(scenario)
        out = finish(old)
    assert out["rc"] == 3 and out["error"] == "LogOwnershipLost", out
    # The group must stay at batch 1's end: batch 1's records are visible, and a consumer
    # failing over from the group would read them again.
    assert group_offsets(scenario, group, source) == {(source, 0): 20, (source, 1): 9}
    scenario.audit()
