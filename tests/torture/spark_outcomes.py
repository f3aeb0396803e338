"""How each batch of a Spark schedule ended, read from what twopc reported. Pure: no I/O.

Spark runs the protocol in driver-side Python workers of other processes, so the harness cannot ask
a Coordinator what it did. It has three accounts instead, all written by twopc itself:

- the checkpoint log's records, collected after each driver run, so that every record is known with
  the run that appended it (a record is never rewritten; purged ones were collected before);
- the recovery reports (observe.recovery_summary) that twopc logs as JSON lines (WARNING, logger
  ``twopc``) in the driver-side workers, which Spark copies to the driver's stderr;
- the typed errors in that stderr (LogOwnershipLost, DataLossError).

A batch's outcome (tests/torture/result.py OUTCOME_KINDS), from its last intent and what ended it:
- an operator's Resolved record: resolved by the operator (after DataLossError, if an Aborted record
  says that a re-run differed from the visible data);
- a Partial record: the re-run repaired it;
- a RollForward between the intent and its Committed, naming the intent's ids: rolled forward;
- a recovery report that recorded the batch committed: recognised committed;
- ended by a run later than the one that first attempted the batch: rewritten;
- otherwise committed by the first driver.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twopc.protocol.log_records import (
    Aborted,
    Committed,
    Duplicates,
    LogRecord,
    Partial,
    Prepared,
    Resolved,
    RollForward,
)

REPORT_EVENT = '"event": "recovery_report"'


def recovery_reports(stderr: str) -> list[dict[str, Any]]:
    """The recovery summaries twopc logged in a driver's stderr (one JSON object per line)."""
    found: list[dict[str, Any]] = []
    for line in stderr.splitlines():
        if REPORT_EVENT not in line or "{" not in line:
            continue
        try:
            doc = json.loads(line[line.index("{"):])
        except ValueError:
            continue  # a line cut by another process's output: the log records still count
        if isinstance(doc, dict):
            found.append(doc)
    return found


@dataclass(frozen=True)
class Appended:
    """One log record and the driver run (its index in the schedule) that appended it."""

    seq: int
    record: LogRecord
    run: int


@dataclass
class Classified:
    outcomes: Counter[str] = field(default_factory=Counter)
    by_batch: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _batch_of(record: LogRecord) -> str | None:
    return getattr(record, "batch", None)


def classify(appended: Sequence[Appended], reports: Iterable[Mapping[str, Any]],
             first_run: Mapping[str, int], batches: Iterable[str]) -> Classified:
    """The outcome of each of `batches` (every batch the schedule ran; a batch that raised
    DataLossError and was then resolved counts both). `first_run[b]` is the run
    that first attempted batch b (a batch missing there counts as attempted by the run that
    appended its first record)."""
    result = Classified()
    recognised = {b for r in reports for b, outcome in dict(r.get("batches", {})).items()
                  if outcome == "committed"}
    for batch in batches:
        mine = [a for a in appended if _batch_of(a.record) == batch]
        outcome = _outcome(batch, mine, appended, recognised, first_run)
        if outcome.startswith("problem: "):
            result.problems.append(outcome[len("problem: "):])
            continue
        result.by_batch[batch] = outcome
        result.outcomes.update(outcome.split("+"))
    for a in appended:
        if (isinstance(a.record, Committed) and a.record.orphans) or (
                isinstance(a.record, Duplicates) and a.record.ids):
            result.outcomes["fenced"] += 1  # zombie attempts or a re-run's duplicates, fenced
    return result


def _outcome(batch: str, mine: Sequence[Appended], everything: Sequence[Appended],
             recognised: set[str], first_run: Mapping[str, int]) -> str:
    refused = any(isinstance(a.record, Aborted) and "re-run differs" in a.record.reason
                  for a in mine)
    if any(isinstance(a.record, Resolved) and a.record.decision == "committed" for a in mine):
        return "data_loss_raised+resolved_by_operator" if refused else "resolved_by_operator"
    intents = {a.seq: (a, a.record) for a in mine if isinstance(a.record, Prepared)}
    ends = [(a, a.record) for a in mine if isinstance(a.record, Committed)]
    if not ends:
        return f"problem: batch {batch} is not committed in the twopc log (records: " \
               f"{[type(a.record).__name__ for a in mine]})"
    if len(ends) > 1:
        return f"problem: batch {batch} has {len(ends)} committed records"
    end, committed = ends[0]
    if refused:  # refused, then re-run with the same data after all
        return "data_loss_raised+repaired"
    if any(isinstance(a.record, Partial) for a in mine):
        return "repaired"
    if committed.intent_seq is None:  # an empty batch: nothing was written
        return "committed"
    if committed.intent_seq not in intents:
        return f"problem: batch {batch}'s committed record names intent {committed.intent_seq}, " \
               "which is not a prepared record of this batch"
    intent, prepared = intents[committed.intent_seq]
    ids = {h.transactional_id for h in prepared.handles}
    if any(isinstance(a.record, RollForward) and intent.seq < a.seq < end.seq
           and ids & set(a.record.ids) for a in everything):
        return "rolled_forward"
    if batch in recognised:
        return "recognised_committed"
    if end.run > first_run.get(batch, mine[0].run):
        return "rewritten"
    return "committed"
