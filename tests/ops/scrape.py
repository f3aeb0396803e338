"""Test helper: scrape a metrics endpoint over HTTP and read it back with prometheus_client's own
parser, as Prometheus would."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse(text: str) -> list[Sample]:
    return [Sample(s.name, dict(s.labels), s.value)
            for family in text_string_to_metric_families(text) for s in family.samples]


def scrape(url: str) -> list[Sample]:
    with urllib.request.urlopen(url, timeout=60) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        return parse(answer.read().decode())


def value(samples: list[Sample], name: str, **labels: str) -> float | None:
    """The one sample of `name` whose labels include `labels`, None if there is none."""
    found = [s.value for s in samples
             if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) <= 1, f"{name} {labels}: {len(found)} samples"
    return found[0] if found else None


def pins(samples: list[Sample]) -> dict[tuple[str, int], dict[str, str]]:
    """(topic, partition) -> the labels of the transaction pinning it."""
    return {(s.labels["topic"], int(s.labels["partition"])): s.labels for s in samples
            if s.name == "twopc_open_transaction_info"}


def scrape_until(url: str, done: Callable[[list[Sample]], bool], timeout_s: float = 60
                 ) -> list[Sample]:
    """Scrape (a second apart) until `done` holds: commit markers land just after a commit."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = scrape(url)
        if done(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout_s} s; last scrape: "
                                 f"{[s for s in samples if s.name.startswith('twopc_')][:40]}")
        time.sleep(1.0)
