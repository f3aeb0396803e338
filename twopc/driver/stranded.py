"""Committed transactions whose commit markers the broker dropped: found and released.

Kafka up to 4.3.1 can lose a commit for good when a broker is SIGKILLed while commit markers are
pending (tests/broker/test_restart_mid_commit.py): after the restart the coordinator records
CompleteCommit without writing the markers, and the data partitions keep the transaction open.
Their last stable offset then stays at its first record: read_committed consumers stop there, and
the records twopc committed are invisible. A retried EndTxn or a fence sends nothing.

The cure is a new transaction on the same transactional id (same producer id, next epoch) that
adds the stuck partitions and commits (`ControlClient.release_stranded`): its COMMIT markers end
the stranded transaction as committed. Recovery looks for this after it settled the intents, over
the committed batches the log still holds: cheap when nothing is stuck (one read_committed
ListOffsets per leader), exact when something is (DescribeProducers names whose open transaction
holds a partition back). `verdicts.judge` is the pure decision; `release_stranded_commits` asks and acts,
after a record that names the ids (docs/design.md section 5).

What the check cannot prove is never taken for settled: a partition whose producer states cannot
be read (DescribeProducers refused, no leader) may be held open, and so may one whose release
failed. Such ids stay held in the log (`released` and `stranded` records, folded into
`LogState.stranded`): no task takes them, and every later check looks at them again until it
finds them released or settled.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from checkpoint.memo import Memo
from twopc.control import (
    ControlClient,
    EndTxnOutcome,
    EndTxnRequest,
    LogCheckRequest,
    LogOutcome,
    ReleaseResult,
    UnknownReason,
)
from twopc.control.errors import ControlError, error_name
from twopc.errors import LogOwnershipLost, StrandedCommitAborted
from twopc.protocol.handle import Handle, PartitionSpan
from twopc.protocol.holds import (
    HoldProof,
    TopicPartition,
    committed_handles,
    hold_changes,
    marker_window_s,
    maybe_held,
    proof_of,
    stuck_spans,
    to_prove,
    unreadable_spans,
)
from twopc.protocol.log_records import LogRecord, Released
from twopc.protocol.state import BatchState, LogState, TxnKey, txn_key
from twopc.protocol.verdicts import (
    Fate,
    StrandedFate,
    StrandedVerdict,
    Verdict,
    fate_of_log_check,
    judge,
)

log = logging.getLogger("twopc.stranded")

# The judging's own polls (after the ListOffsets-only wait below found a partition still held):
# ask again soon, then back off.
_FIRST_POLL_S = 0.01
_POLL_S = 0.2
# A held id's proof (its log checks) retries a leader that cannot be reached this long at most:
# unproven, the hold stays, and the next check asks again.
_PROOF_BUDGET_S = 2.0


# ---- the I/O ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StrandedNote:
    batch: str
    transactional_id: str
    fate: StrandedFate
    reason: str
    partitions: tuple[TopicPartition, ...] = ()
    end_at: tuple[int, int] | None = None  # FINISH: the release's (producer id, epoch)


@dataclass
class StrandedReport:
    checked: int = 0  # handles looked at
    notes: list[StrandedNote] = field(default_factory=list)
    releases: dict[str, ReleaseResult] = field(default_factory=dict)
    # The transactions of `prove` the log was asked about, each with its batch.
    looked: tuple[tuple[str, TxnKey], ...] = ()

    @property
    def released(self) -> tuple[str, ...]:
        return tuple(sorted(t for t, r in self.releases.items() if r.released))

    @property
    def unreleased(self) -> list[StrandedNote]:
        """Stranded or possibly stranded transactions left as they are (reported, with why)."""
        failed = {t for t, r in self.releases.items() if not r.released}
        acted = (StrandedFate.RELEASE, StrandedFate.FINISH)
        return [n for n in self.notes if n.fate not in acted or n.transactional_id in failed]

    def merged(self, other: StrandedReport) -> StrandedReport:
        """Both checks' findings (recovery checks before its sweep and after it commits)."""
        return StrandedReport(self.checked + other.checked, [*self.notes, *other.notes],
                              {**self.releases, **other.releases},
                              tuple(sorted({*self.looked, *other.looked})))

    def why(self, note: StrandedNote) -> str:
        """Why `note`'s transaction is left as it is (its failed release, if one was tried)."""
        r = self.releases.get(note.transactional_id)
        if r is not None and not r.released:
            return f"release failed at {r.step}: {r.error}"
        return note.reason

    def summary(self) -> str:
        parts = []
        if self.released:
            parts.append(f"released {len(self.released)} stranded commits")
        for n in self.unreleased:
            parts.append(f"{n.transactional_id} (batch {n.batch}) {n.fate.value}: {self.why(n)}")
        return "; ".join(parts)


class Door(Protocol):
    """What the check needs of its driver call (driver/call.py `DriverCall`): the log's state, an
    append, the control client for its reads, and the release, which only an id a record of the
    call names may get."""

    @property
    def state(self) -> LogState: ...

    @property
    def control(self) -> ControlClient: ...

    def append(self, record: LogRecord) -> int: ...

    def release(self, transactional_id: str, partitions: Sequence[tuple[str, int]],
                producer_id: int) -> ReleaseResult: ...

    def end_txns(self, requests: Sequence[EndTxnRequest]) -> dict[str, EndTxnOutcome]: ...

    def acknowledged_losses(self, batch: str) -> Collection[TxnKey]: ...


def release_stranded_commits(call: Door,
                             batches: Iterable[BatchState], *, wait_ms: int, grace_ms: int,
                             patient: Collection[str] | None = None,
                             prove: Collection[TxnKey] = (),
                             clock: Callable[[], float] = time.monotonic) -> StrandedReport:
    """Find the committed handles of `batches` whose partitions their open transaction still holds
    back (or may: unreadable), wait (bounded) while markers may be on their way, then record and
    release them; record which ids stay held and which are cleared (`hold_changes`).

    `patient`: the batches whose undecided handles are worth the bounded wait (a commit's own
    batch); the others are judged on one look, and what is not settled stays held for a later
    check (None: every batch). So a partition that cannot be read for a while costs the commits
    that do not touch it nothing but a hold.

    `prove`: the transactions (id, producer id, epoch) whose records the log must prove ended
    committed, not only ended (DriverCall `_to_prove`): every span of theirs is asked about
    (`report.looked` names those the check looked at)."""
    batches = list(batches)
    handles = committed_handles(batches)
    report = StrandedReport(checked=len(handles))
    control = call.control
    if not handles and not call.state.stranded:
        return report
    # A span may be held back when its partition's last stable offset is unknown or at or below
    # its first offset: the latest first offset of each partition tells whether any span there
    # can be. (The log's retained batches hold thousands of spans, asked after every commit; the
    # suspects are worked out span by span only when some partition may hold one.)
    latest = _latest_of(batches)
    lso = control.wait_stable(latest, marker_window_s(0, wait_ms)) if latest else {}
    lso.update(_await_own_markers(control, batches, handles, patient, lso, wait_ms))
    suspects: list[tuple[str, Handle]] = []
    if any(tp not in lso or lso[tp] <= first for tp, first in latest.items()):
        suspects = [(b, h) for b, h in handles if any(maybe_held(s, lso) for s in h.spans)]
    if suspects:  # else the usual case: one ListOffsets per leader
        _judge_and_release(call, suspects, report, wait_ms, grace_ms, clock, patient)
        _await_releases(control, report, suspects)
    for n in report.unreleased:
        log.error("a committed transaction still holds partitions open: %s (batch %s): %s",
                  n.transactional_id, n.batch, report.why(n))
    unreleased = {n.transactional_id: (n.batch, report.why(n)) for n in report.unreleased}
    # A first look (`prove`): the batch's records ended, but ended committed? Lost markers and
    # then an outside abort (`kafka-transactions.sh abort` of the hanging transaction) end them
    # too, aborted, and only the log tells the two apart. An aborted one is held from now on,
    # so that every later check proves it again and raises, until an operator acknowledges it.
    looks = [(name, h) for name, h in handles if txn_key(h) in prove
             and h.transactional_id not in unreleased and h.transactional_id not in call.state.stranded]
    # A look the log could not answer yet (a leader away, not stable) is held too: every later
    # check proves it again, and it goes only once proven committed. Records the log no longer
    # has (retention, a re-created topic) cannot be proven either way: said, not held.
    first_look = without_acknowledged(call, looks, prove_holds(control, looks) if looks
                                      else HoldEvidence({}, {}))
    for name, h in looks:
        tid = h.transactional_id
        lost = first_look.aborted.get(txn_key(h))
        if lost is not None:
            unreleased.setdefault(tid, (name, f"the log proves its committed records aborted: {lost}"))
        elif tid in first_look.retry:
            unreleased.setdefault(tid, (name, "the proof that its records ended committed could "
                                        f"not read the log yet: {first_look.retry[tid]}"))
        elif first_look.proofs[tid][0] is HoldProof.UNPROVEN:
            log.warning("twopc: batch %s, %s: the log cannot tell whether its committed records "
                        "ended committed (%s); not held", name, tid, first_look.proofs[tid][1])
    # Looked at: proven, held (later checks go on), or past proving; or skipped because its id
    # is held (for this batch or another): the hold goes only once every visible handle of the
    # id, this one among them, is proven committed, and the batch's offsets wait meanwhile.
    report.looked = tuple(sorted({(name, txn_key(h)) for name, h in handles
                                  if txn_key(h) in prove}))
    # A hold goes only once the log proves its records committed (issue 30): never silently.
    candidates = to_prove(call.state, (h for _, h in handles), unreleased)
    evidence = _prove_held(call, [(b, h) for b, h in handles if h.transactional_id in candidates])
    changes = hold_changes(call.state, (h for _, h in handles), unreleased,
                           {t: p for t, (p, _) in evidence.proofs.items()})
    losses = {**first_look.aborted, **evidence.aborted}
    if changes is not None:
        try:
            call.append(changes)
        except LogOwnershipLost:
            # Another driver is in charge of the log (its own checks hold and raise): the loss
            # this check proved is said first, not hidden behind the lost append.
            raise_losses(handles, losses)
            raise
    raise_losses(handles, losses)
    return report


def _await_own_markers(control: ControlClient, batches: Sequence[BatchState],
                       handles: Sequence[tuple[str, Handle]], patient: Collection[str] | None,
                       lso: Mapping[TopicPartition, int], wait_ms: int
                       ) -> dict[TopicPartition, int]:
    """The partitions of the batches the check is patient for (a commit's own, the batches a
    recovery just settled) that answered not stable yet, asked again, ListOffsets alone, for
    longer the more transactions those batches have (`holds.marker_window_s`: their markers are
    on their way). A partition only other batches have, every partition of a check patient for
    all (recovery's first check: the retained batches' markers landed long ago), and one whose
    leader did not answer (`wait_stable` already retried it) go to the judging after the base
    window, as before."""
    if patient is None:
        return {}
    ending = sum(1 for b, _ in handles if b in patient)
    extra = marker_window_s(ending, wait_ms) - marker_window_s(0, wait_ms)
    own = _latest_of(b for b in batches if b.batch in patient)
    waiting = {tp: first for tp, first in own.items() if tp in lso and lso[tp] <= first}
    return control.wait_stable(waiting, extra) if waiting and extra > 0 else {}


def _acknowledged(call: Door, handles: Sequence[tuple[str, Handle]],
                  aborted: Mapping[TxnKey, str]) -> set[TxnKey]:
    """Which of the losses `aborted` (among `handles`) an operator acknowledged already: the
    index is read only for the batches of a loss found, and each is said in the log."""
    acknowledged: set[TxnKey] = set()
    for name in sorted({name for name, h in handles if txn_key(h) in aborted}):
        acknowledged.update(k for k in call.acknowledged_losses(name) if k in aborted)
    for k in sorted(acknowledged):
        log.warning("twopc: %s (producer id %d, epoch %d): committed records proven aborted, "
                    "a loss an operator acknowledged: %s", *k, aborted[k])
    return acknowledged


def without_acknowledged(call: Door, looks: Sequence[tuple[str, Handle]],
                         evidence: HoldEvidence) -> HoldEvidence:
    """`evidence` without the losses an operator acknowledged already (a repair of the batch
    proves its transactions anew): said again in the log, not raised or held again, or the
    batch could never be acknowledged past (an acknowledgment is made once)."""
    acknowledged = _acknowledged(call, looks, evidence.aborted) if evidence.aborted else set()
    if not acknowledged:
        return evidence
    return HoldEvidence(evidence.proofs, {k: v for k, v in evidence.aborted.items()
                                          if k not in acknowledged}, evidence.retry)


def _prove_held(call: Door, handles: Sequence[tuple[str, Handle]]) -> HoldEvidence:
    """The proof of the held ids' visible handles, a loss an operator acknowledged left out: an
    id reused by a later batch and held for it (its proof failed for a moment, its release was
    cut short) is proven over every visible handle of it, the acknowledged one among them, and
    that one must neither raise again nor keep the hold for good. An id left with nothing but
    acknowledged losses has nothing more to prove."""
    evidence = prove_holds(call.control, handles)
    acknowledged = _acknowledged(call, handles, evidence.aborted) if evidence.aborted else set()
    if not acknowledged:
        return evidence
    rest = [(b, h) for b, h in handles if txn_key(h) not in acknowledged]
    evidence = prove_holds(call.control, rest) if rest else HoldEvidence({}, {})
    for tid in {h.transactional_id for _, h in handles} - set(evidence.proofs):
        evidence.proofs[tid] = (HoldProof.COMMITTED, "nothing but losses acknowledged")
    return evidence


def raise_losses(handles: Sequence[tuple[str, Handle]], aborted: Mapping[TxnKey, str]) -> None:
    """StrandedCommitAborted naming each of `handles` with a span proven aborted, if any."""
    if aborted:
        raise StrandedCommitAborted([(b, h, aborted[txn_key(h)]) for b, h in handles
                                     if txn_key(h) in aborted])


@dataclass(frozen=True)
class HoldEvidence:
    """What the log checks of a held id's visible handles prove: the id's proof (its hold goes
    only on COMMITTED), and which of those handles have a span proven aborted, each with the
    first such span's answer. The loss is a handle's, not the id's: an id reused by a later batch
    holds handles of several batches, and only those with an aborted span lost records."""

    proofs: dict[str, tuple[HoldProof, str]]
    aborted: dict[TxnKey, str]
    # Ids with a span the log could not answer for yet (not stable, the fetch failed): asking
    # again later may prove it, unlike records gone (retention, a re-created topic).
    retry: dict[str, str] = field(default_factory=dict)


def prove_holds(control: ControlClient, handles: Sequence[tuple[str, Handle]]) -> HoldEvidence:
    """The log checks of every span of `handles` (the held ids' visible handles, or a batch's on
    its first look), in flight together."""
    verdicts: dict[str, list[Verdict]] = {}
    why: dict[str, str] = {}
    aborted: dict[TxnKey, str] = {}
    spans = [(h, s) for _, h in handles for s in h.spans]
    answers = control.log_checks([LogCheckRequest(s.topic, s.partition, s.first_offset,
                                                  h.producer_id, h.epoch, s.topic_id)
                                  for h, s in spans], _PROOF_BUDGET_S)
    retry: dict[str, str] = {}
    for (h, s), answer in zip(spans, answers, strict=True):
        v = fate_of_log_check(answer)
        verdicts.setdefault(h.transactional_id, []).append(v)
        where = f"{s.topic}[{s.partition}]@{s.first_offset}: {v.reason}"
        if v.fate is not Fate.COMMITTED:
            why.setdefault(h.transactional_id, where)
        if v.fate is Fate.ABORTED:
            aborted.setdefault(txn_key(h), where)
        if answer.outcome is LogOutcome.NOT_YET_STABLE or answer.reason is UnknownReason.FETCH_ERROR:
            retry.setdefault(h.transactional_id, where)
    return HoldEvidence({t: (proof_of(vs), why.get(t, "")) for t, vs in verdicts.items()},
                        aborted, retry)


def prove_patiently(control: ControlClient, handles: Sequence[tuple[str, Handle]]
                    ) -> HoldEvidence:
    """`prove_holds`, asked once more after a moment (the proof's budget) for the partitions not
    stable yet: a look right after the batch's commit (a re-run started as it returns) finds its
    markers still on their way. Still not stable then: the caller says it cannot answer yet."""
    evidence = prove_holds(control, handles)
    past = _latest_by_partition(s for _, h in handles if h.transactional_id in evidence.retry
                                for s in h.spans)
    if not past:
        return evidence
    with contextlib.suppress(ControlError):  # the second proof says what is still unanswered
        control.wait_stable(past, _PROOF_BUDGET_S)
    return prove_holds(control, handles)


# Per batch, its visible handles and the latest first offset of their spans per partition. A
# call re-reads the log, but the records it decoded before come back as the same objects
# (session.py), so a batch whose handles are those of an entry reuses its offsets.
_latest_memo: Memo[tuple[str, int | None], tuple[tuple[Handle, ...], dict[TopicPartition, int]]] \
    = Memo(64)


def _latest_first_offsets(batch: BatchState) -> dict[TopicPartition, int]:
    handles = tuple(batch.committed.values())
    key = (batch.batch, batch.intent_seq)
    memo = _latest_memo.get(key)
    if memo is not None and len(memo[0]) == len(handles) and \
            all(a is b for a, b in zip(memo[0], handles, strict=True)):
        return memo[1]
    latest = _latest_by_partition(s for h in handles for s in h.spans)
    _latest_memo.put(key, (handles, latest))
    return latest


def _latest_of(batches: Iterable[BatchState]) -> dict[TopicPartition, int]:
    """Per partition, the latest first offset of the visible spans of `batches`."""
    latest: dict[TopicPartition, int] = {}
    for b in batches:
        for tp, first in _latest_first_offsets(b).items():
            if latest.get(tp, -1) < first:
                latest[tp] = first
    return latest


def _latest_by_partition(spans: Iterable[PartitionSpan]) -> dict[TopicPartition, int]:
    """Per partition, the latest first offset of `spans`: the partition is stable past all of
    them once its last stable offset is above it."""
    latest: dict[TopicPartition, int] = {}
    for s in spans:
        tp = (s.topic, s.partition)
        if latest.get(tp, -1) < s.first_offset:
            latest[tp] = s.first_offset
    return latest


def _judge_and_release(call: Door,
                       suspects: Sequence[tuple[str, Handle]], report: StrandedReport,
                       wait_ms: int, grace_ms: int, clock: Callable[[], float],
                       patient: Collection[str] | None) -> None:
    released = {t: hold.released for t, hold in call.state.stranded.items()}
    verdicts, stuck = _observe(call.control, suspects, released, wait_ms, grace_ms, clock,
                               patient)
    for b, h in suspects:
        v = verdicts[txn_key(h)]
        if v.fate is not StrandedFate.SETTLED:
            report.notes.append(StrandedNote(b, h.transactional_id, v.fate, v.reason, tuple(
                (s.topic, s.partition) for s in stuck[txn_key(h)]), v.end_at))
    _finish_releases(call, report)
    to_release: dict[str, set[TopicPartition]] = {}
    pids: dict[str, int] = {}
    for n in report.notes:
        if n.fate is StrandedFate.RELEASE:
            to_release.setdefault(n.transactional_id, set()).update(n.partitions)
    for _, h in suspects:
        pids[h.transactional_id] = h.producer_id
    if not to_release:
        return
    batches_named = tuple(sorted({n.batch for n in report.notes
                                  if n.fate is StrandedFate.RELEASE}))
    # Holds the ids from here on: a release cut short by a crash is retried by a later check.
    call.append(Released(batches_named, tuple(sorted(to_release)), tuple(
        (t, topic, p) for t, tps in sorted(to_release.items()) for topic, p in sorted(tps))))
    for tid, tps in sorted(to_release.items()):
        report.releases[tid] = call.release(tid, sorted(tps), producer_id=pids[tid])


def _await_releases(control: ControlClient, report: StrandedReport,
                    suspects: Sequence[tuple[str, Handle]]) -> None:
    """A release's markers are written after its EndTxn is answered: wait for them a moment
    (the proof's budget), so that the check that released a hold also proves it committed and
    clears it. Else (or if this wait fails) the hold stays, and the next check clears it."""
    done = {t: set(r.partitions) for t, r in report.releases.items() if r.error is None}
    past = _latest_by_partition(s for _, h in suspects for s in h.spans
                                if (s.topic, s.partition) in done.get(h.transactional_id, ()))
    if past:
        with contextlib.suppress(ControlError):
            control.wait_stable(past, _PROOF_BUDGET_S)


def _finish_releases(call: Door, report: StrandedReport) -> None:
    """Commit our own releases that were cut short before their EndTxn (verdicts.judge, FINISH),
    at the epoch the coordinator shows, after a record naming them: never a new release, whose
    InitProducerId would abort them and the committed records with them."""
    finish = {n.transactional_id: n for n in report.notes if n.fate is StrandedFate.FINISH}
    if not finish:
        return
    call.append(Released(tuple(sorted({n.batch for n in finish.values()})), tuple(sorted(finish)),
                         tuple((t, topic, p) for t, n in sorted(finish.items())
                               for topic, p in sorted(n.partitions))))
    requests = []
    for tid, n in sorted(finish.items()):
        assert n.end_at is not None
        requests.append(EndTxnRequest(tid, n.end_at[0], n.end_at[1], True))
    answers = call.end_txns(requests)
    for r in requests:
        a = answers.get(r.transactional_id)
        error = None if a is not None and a.committed else (
            "no answer" if a is None else a.error or a.kind.value)
        report.releases[r.transactional_id] = ReleaseResult(
            r.transactional_id, r.producer_id, r.epoch, finish[r.transactional_id].partitions,
            error, "end_txn" if error else "")


def _observe(control: ControlClient, suspects: Sequence[tuple[str, Handle]],
             released: Mapping[str, frozenset[TopicPartition]], wait_ms: int,
             grace_ms: int, clock: Callable[[], float], patient: Collection[str] | None
             ) -> tuple[dict[TxnKey, StrandedVerdict], dict[TxnKey, list[PartitionSpan]]]:
    """Ask until every suspect is settled or proven stranded twice, `grace_ms` apart, or until
    `wait_ms` ran out (then what is still waiting is reported as such)."""
    start = clock()
    delay = _FIRST_POLL_S
    first_release: dict[TxnKey, float] = {}
    while True:
        now = clock()
        # The coordinator first: once it shows a completed state, every marker was acknowledged,
        # so a partition still held open after that lost its marker.
        desc = control.describe_transactions(sorted({h.transactional_id for _, h in suspects}))
        # A partition whose leader is down is retried only within what is left of the wait: it
        # stays unreadable (never settled), and held.
        budget = max(0.5, wait_ms / 1000 - (now - start))
        lso = control.last_stable_offsets(sorted({(s.topic, s.partition)
                                                  for _, h in suspects for s in h.spans}), budget)
        held = sorted({(s.topic, s.partition) for _, h in suspects for s in h.spans
                       if maybe_held(s, lso)})
        states = control.describe_producers(held, budget) if held else {}
        open_at: dict[TopicPartition, frozenset[tuple[int, int]]] = {
            tp: frozenset((a.producer_id, a.current_txn_start_offset) for a in state.producers)
            for tp, state in states.items() if not state.error_code}
        errors = {tp: "no answer" for tp in held if tp not in states}
        errors.update({tp: error_name(state.error_code) for tp, state in states.items()
                       if state.error_code})
        verdicts: dict[TxnKey, StrandedVerdict] = {}
        stuck: dict[TxnKey, list[PartitionSpan]] = {}
        for _, h in suspects:
            k = txn_key(h)
            stuck[k] = stuck_spans(h, lso, open_at)
            verdicts[k] = judge(h, desc.get(h.transactional_id), stuck[k],
                                unreadable_spans(h, lso, errors),
                                released.get(h.transactional_id, frozenset()))
        pending = False
        waits_for = {txn_key(h) for b, h in suspects if patient is None or b in patient}
        for k, v in verdicts.items():
            if v.fate is StrandedFate.RELEASE:
                first_release.setdefault(k, now)
                pending |= now - first_release[k] < grace_ms / 1000
            else:
                first_release.pop(k, None)
                pending |= v.fate is StrandedFate.WAIT and k in waits_for
        out_of_time = now - start >= wait_ms / 1000
        if not pending or out_of_time:
            for k, v in verdicts.items():
                if v.fate is StrandedFate.RELEASE and now - first_release[k] < grace_ms / 1000:
                    verdicts[k] = StrandedVerdict(StrandedFate.WAIT, "seen stranded only once "
                                                  f"within {wait_ms} ms: " + v.reason)
                elif v.fate is StrandedFate.WAIT:
                    verdicts[k] = StrandedVerdict(StrandedFate.WAIT, f"still after {wait_ms} ms: "
                                                  + v.reason)
            return verdicts, stuck
        time.sleep(delay)
        delay = min(delay * 2, _POLL_S)
