"""The long run's report: faults and outcomes by kind, recovery times, failures with their seeds.
Pure: it adds up ScheduleResults and renders JSON and Markdown."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from tests.torture.result import (
    FAULT_KINDS,
    OUTCOME_KINDS,
    REACHED_KINDS,
    ScheduleResult,
    required_faults,
    required_outcomes,
)

MIN_FAULTS = 10


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(results: Sequence[ScheduleResult], variant: str, seed: int,
              min_faults: int = MIN_FAULTS, replicated: bool = False) -> dict[str, Any]:
    """The run's figures and verdict. `replicated`: a cluster of several brokers (it alone takes
    leader_down_during_check; it never drops a commit's markers, so loss_acknowledged, which
    needs a stranded commit, is not required of it)."""
    faults: Counter[str] = Counter({k: 0 for k in FAULT_KINDS})
    outcomes: Counter[str] = Counter({k: 0 for k in OUTCOME_KINDS})
    fired: Counter[str] = Counter()
    reached: Counter[str] = Counter({k: 0 for k in REACHED_KINDS})
    by_workload: Counter[str] = Counter()
    recovery: list[float] = []
    victims: Counter[str] = Counter()
    for r in results:
        faults.update(r.faults)
        fired.update(r.fired)
        reached.update(r.reached)
        victims.update(r.victims)
        outcomes.update(r.outcomes)
        by_workload[r.workload] += 1
        recovery.extend(r.recovery_s)
    failed = [r for r in results if not r.passed]
    problems = [f"schedule seed {r.seed} ({r.workload}) failed: {r.error}" for r in failed]
    need_faults, need_outcomes = required_faults(replicated), required_outcomes(replicated)
    problems += [f"fault {k} injected {n} times (< {min_faults})" for k, n in faults.items()
                 if n < min_faults and k in need_faults]
    problems += [f"outcome {k} never reached" for k, n in outcomes.items()
                 if n == 0 and k in need_outcomes]
    return {
        "variant": variant, "seed": seed, "schedules": len(results),
        "schedules_by_workload": dict(by_workload), "passed": len(results) - len(failed),
        "failed": len(failed), "faults": dict(faults), "min_faults": min_faults,
        "required_faults": list(need_faults), "required_outcomes": list(need_outcomes),
        "outcomes": dict(outcomes), "victims": dict(victims),
        "fired": dict(sorted(fired.items())), "reached": dict(reached),
        "recovery_s": {"count": len(recovery), "p50": percentile(recovery, 50),
                       "p99": percentile(recovery, 99), "max": max(recovery, default=0.0)},
        "records": {"expected": sum(r.expected for r in results),
                    "found": sum(r.found for r in results),
                    "duplicates": sum(r.duplicates for r in results),
                    "missing": sum(r.missing for r in results),
                    "reported_lost": sum(r.reported_lost for r in results),
                    "open_transactions": sum(r.open_transactions for r in results),
                    "stranded_released": sum(r.stranded_released for r in results)},
        "seconds": sum(r.seconds for r in results),
        "ok": not problems, "problems": problems,
        "failures": [r.to_json() for r in failed],
    }


def render_markdown(summary: dict[str, Any]) -> str:
    rec = summary["recovery_s"]
    recs = summary["records"]
    lines = [
        f"# Torture report: {summary['variant']}",
        "",
        f"{summary['schedules']} schedules (seeds from {summary['seed']}; "
        f"{summary['schedules_by_workload']}), {summary['passed']} passed, "
        f"{summary['failed']} failed, {summary['seconds']:.0f} s of schedules. "
        f"Verdict: **{'PASS' if summary['ok'] else 'FAIL'}**.",
        *([] if not summary.get("commits") else [
            "", "Run on commit(s) " + ", ".join(f"`{c}`" for c in summary["commits"])
            + " (journal-" + summary["variant"] + ".jsonl has each schedule's)."]),
        "",
        f"## Faults injected (each at least {summary.get('min_faults', MIN_FAULTS)} times)", "",
        "| kind | times |", "|---|---|",
        *[f"| {k} | {n} |" + ("" if k in summary.get("required_faults", FAULT_KINDS)
                              else " (not on this cluster)")
          for k, n in summary["faults"].items()],
        "", "Control-client request faults as they fired (the fault log: API and action; one "
        "injected fault fires once per attempt it hits):", "",
        "| request | action | times |", "|---|---|---|",
        *[f"| {k.split(' ')[0]} | {k.split(' ')[-1]} | {n} |"
          for k, n in summary.get("fired", {}).items()],
        "", "## Issue 30, items 1 and 2: how often the faults reached them", "",
        "| path | times |", "|---|---|",
        *[f"| {k} | {n} |" for k, n in summary.get("reached", {}).items()],
        *([] if not summary.get("victims") else [
            "", "On this replicated cluster each broker fault killed one broker: "
            + ", ".join(f"the {role} {n} times" for role, n in sorted(summary["victims"].items()))
            + " (the partition leader, or the transactional ids' coordinator)."]),
        "", "## Outcomes (batches)", "", "| kind | batches |", "|---|---|",
        *[f"| {k} | {n} |" + ("" if k in summary.get("required_outcomes", OUTCOME_KINDS)
                              else " (not required on this cluster)")
          for k, n in summary["outcomes"].items()],
        "", "## Records", "",
        f"expected {recs['expected']}, found {recs['found']}, duplicates {recs['duplicates']}, "
        f"missing {recs['missing']}, reported lost by DataLossError (then resolved or "
        f"acknowledged by the operator) {recs['reported_lost']}, open transactions left "
        f"{recs['open_transactions']}, "
        f"stranded commits (markers dropped by a killed broker) released by the last restart's "
        f"recovery {recs['stranded_released']}.",
        "", "## Recovery time (wall clock of each recovery call)", "",
        f"{rec['count']} recoveries: p50 {rec['p50']:.2f} s, p99 {rec['p99']:.2f} s, "
        f"max {rec['max']:.2f} s.",
        "", "## Problems", "",
    ]
    lines += [f"- {p}" for p in summary["problems"]] or ["none"]
    for f in summary["failures"]:
        lines += ["", f"### seed {f['seed']} ({f['workload']})", "", "```",
                  *f["steps"], f"error: {f['error']}", "```",
                  f"Replay: `python -m tests.torture --variant {summary['variant']} "
                  f"--only-seed {f['seed']}`" + (" --spark-every 1" if f["workload"] != "core"
                                                 else "")]
    return "\n".join(lines) + "\n"
