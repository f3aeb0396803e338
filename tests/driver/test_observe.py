"""Observability: the figures of a batch (pure, with hypothesis), the one JSON line per call on logger
`twopc`, the numeric dict for Spark, and the lines a real commit and a real recovery emit."""

from __future__ import annotations

import json
import logging
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.driver.support import Scenario
from tests.protocol.strategies import batch_handles
from twopc.control import ControlClient
from twopc.driver import observe
from twopc.protocol.clock import coordinator_now
from twopc.protocol.handle import Handle


@given(batch_handles(), st.integers(1_000_000, 3_000_000), st.floats(0, 1e6))
def test_figures_follow_the_handles(handles: tuple[Handle, ...], now_ms: int,
                                    latency_ms: float) -> None:
    fig = observe.figures("commit", "7", "committed", handles, committed=len(handles),
                          now_ms=now_ms, latency_ms=latency_ms)
    assert fig.records == sum(h.record_count for h in handles)
    assert fig.transactions == len(handles) == fig.committed_transactions
    if not handles:
        assert fig.oldest_txn_age_ms is None and fig.oldest_txn_age_ratio is None
        return
    coord_now, _ = coordinator_now(handles, now_ms)
    ratios = [(coord_now - h.start_ms) / h.timeout_ms for h in handles]
    worst = handles[ratios.index(max(ratios))]
    assert fig.oldest_txn_timeout_ms == worst.timeout_ms
    assert fig.oldest_txn_age_ms == max(0, coord_now - worst.start_ms)
    assert fig.oldest_txn_age_ratio == round(fig.oldest_txn_age_ms / worst.timeout_ms, 4)
    # The guard's view: no handle is closer to its timeout than the one reported.
    assert all(r <= max(ratios) for r in ratios)


def test_unknown_event_is_refused() -> None:
    with pytest.raises(ValueError, match="event must be one of"):
        observe.figures("flush", "1", "x", (), committed=0, now_ms=0, latency_ms=0)


@given(batch_handles())
def test_metrics_are_numbers_and_match_the_log_line(handles: tuple[Handle, ...]) -> None:
    fig = observe.figures("recovery", "3", "committed", handles, committed=0,
                          now_ms=2_500_000, latency_ms=12.5)
    m = observe.metrics(fig)
    assert all(isinstance(v, float) for v in m.values())
    assert m["records"] == fig.records and m["commit_latency_ms"] == 12.5
    assert ("oldest_txn_age_ratio" in m) == bool(handles)
    assert observe.metrics(None) == {}


def test_one_json_line_per_call(caplog: pytest.LogCaptureFixture) -> None:
    fig = observe.BatchFigures("commit", "5", "committed", 10, 2, 2, 3.5, 1200, 60000, 0.02)
    with caplog.at_level(logging.INFO, logger="twopc"):
        observe.log_batch(fig)
        observe.log_batch(observe.BatchFigures("commit", "6", "GuardFailed", 0, 0, 0, 1.0,
                                               None, None, None))
    ok, failed = [r for r in caplog.records if r.name == "twopc"]
    assert json.loads(ok.getMessage()) == fig.as_dict() == ok.__dict__["twopc"]
    assert ok.levelno == logging.INFO and failed.levelno == logging.WARNING
    assert json.loads(failed.getMessage())["oldest_txn_age_ms"] is None


def test_a_commit_at_half_the_timeout_warns_with_the_fix() -> None:
    def fig(age: int | None, timeout: int | None) -> observe.BatchFigures:
        ratio = None if age is None or timeout is None else round(age / timeout, 4)
        return observe.BatchFigures("commit", "9", "committed", 10, 2, 2, 3.5, age, timeout, ratio)

    assert observe.age_warning(fig(29_999, 60_000)) is None
    assert observe.age_warning(fig(None, None)) is None
    text = observe.age_warning(fig(30_000, 60_000))
    assert text is not None and "batch 9" in text and "30000 ms old" in text and "50%" in text
    assert "twopc.transactionTimeoutMs" in text and "maxOffsetsPerTrigger" in text
    assert "GuardFailed" in text


# ---- against a real broker: what a commit and a recovery log ----------------------------------


def _lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "twopc"]


@pytest.mark.integration
def test_commit_and_recovery_log_their_figures(scenario: Scenario, control: ControlClient,
                                               caplog: pytest.LogCaptureFixture) -> None:
    coord = scenario.driver(control)
    results = scenario.write("0")
    with caplog.at_level(logging.INFO, logger="twopc"):
        report = coord.commit("0", results)
    [line] = _lines(caplog)
    assert line == report.figures.as_dict() if report.figures else False
    assert line["event"] == "commit" and line["batch"] == "0" and line["outcome"] == "committed"
    assert line["records"] == 4 * scenario.rows and line["transactions"] == 4
    assert line["committed_transactions"] == 4
    assert line["oldest_txn_timeout_ms"] == scenario.timeout_ms
    assert isinstance(line["oldest_txn_age_ms"], int) and line["oldest_txn_age_ms"] >= 0
    assert observe.metrics(report.figures)["records"] == 4 * scenario.rows

    caplog.clear()
    pending = scenario.write("1")
    assert scenario.drive("commit", "1", pending, crash_at="coordinator.after_intent") == {
        "killed": True}
    with caplog.at_level(logging.INFO, logger="twopc"):
        coord.recover()
    [line] = _lines(caplog)
    assert (line["event"], line["batch"], line["outcome"]) == ("recovery", "1", "committed")
    assert line["transactions"] == line["committed_transactions"] == 4
    assert line["records"] == 4 * scenario.rows

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="twopc"):
        coord.abort("2", scenario.write("2"))
    [line] = _lines(caplog)
    assert (line["event"], line["outcome"], line["transactions"]) == ("abort", "fenced", 4)
    scenario.expect("0")
    scenario.expect("1")
    scenario.audit()


@pytest.mark.integration
def test_a_real_commit_past_half_the_timeout_warns(scenario: Scenario, control: ControlClient,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """The transactions of batch 1 are 11 s old at a 20 s timeout when it commits: it commits
    (more than the margin left) and warns, once, on a child of logger `twopc`; batch 0, committed
    at once, does not."""
    coord = scenario.driver(control, margin_ms=500)

    def warnings() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "twopc.driver.coordinator"]

    with caplog.at_level(logging.INFO, logger="twopc"):
        coord.commit("0", scenario.write("0", timeout_ms=20_000))
        assert not warnings()
        results = scenario.write("1", timeout_ms=20_000)
        oldest = min(h.start_ms for r in results if (h := r.handle) is not None)
        time.sleep(max(0.0, (oldest + 11_000) / 1000 - time.time()))
        report = coord.commit("1", results)
    assert report.status == "committed"
    [warned] = warnings()
    assert warned.levelno == logging.WARNING
    assert "batch 1: its oldest transaction was" in warned.getMessage()
    assert "(20000 ms)" in warned.getMessage()
    assert "twopc.transactionTimeoutMs" in warned.getMessage()
    scenario.expect("0")
    scenario.expect("1")
    scenario.audit()
