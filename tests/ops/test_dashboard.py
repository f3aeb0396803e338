"""The example Grafana dashboard and the metrics table of docs/operations.md name only metrics the
exporter emits, and the table names them all (no broker: the names come from the exporter's own
families)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from twopc.ops.metric_values import partition_families
from twopc.ops.metrics import Target, TwopcCollector

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
OPERATIONS = ROOT / "docs" / "operations.md"
NAME = re.compile(r"\btwopc_[a-z_]+\b")


def families() -> dict[str, str]:
    """Each family the exporter emits -> its type (without reading anything)."""
    collector = TwopcCollector(Target({"bootstrap.servers": "127.0.0.1:1"}, ("t",), "/nowhere"))
    out = {f.name: f.type for f in partition_families([])}
    out.update({f.name: f.type for f in collector._exporter_families()})
    for metric in collector._own:
        out.update({f.name: f.type for f in metric.collect()})
    return out


def sample_names(fams: dict[str, str]) -> set[str]:
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"),
                "gauge": ("",)}
    return {name + s for name, kind in fams.items() for s in suffixes[kind]}


def exprs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "expr" and isinstance(v, str)] + [
            e for v in node.values() for e in exprs(v)]
    if isinstance(node, list):
        return [e for v in node for e in exprs(v)]
    return []


def test_names_follow_prometheus_conventions() -> None:
    fams = families()
    assert all(name.startswith("twopc_") for name in fams)
    for name, kind in fams.items():
        if kind == "counter":
            assert not name.endswith("_total")  # prometheus_client adds it to the samples
            continue  # a count: its samples end in _total
        # A gauge or histogram says its unit (or what it is: a ratio, a flag, an info metric).
        assert name.endswith(("_seconds", "_records", "_offset", "_ratio", "_up", "_info",
                              "_transactions", "_partitions")), f"{name}: no unit in the name"


def test_the_dashboard_names_only_what_the_exporter_emits() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["schemaVersion"] >= 36
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    used = {n for e in exprs(dashboard) for n in NAME.findall(e)}
    used |= {n for v in dashboard["templating"]["list"] for n in NAME.findall(json.dumps(v))}
    known = sample_names(families())
    assert used and used <= known, used - known


def test_the_operations_guide_documents_every_metric() -> None:
    text = OPERATIONS.read_text()
    documented = set(NAME.findall(text))
    fams = families()
    wanted = {name + ("_total" if kind == "counter" else "") for name, kind in fams.items()}
    assert wanted <= documented, wanted - documented
    assert "grafana-dashboard.json" in text
