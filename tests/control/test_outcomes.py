"""EndTxn answers to outcomes: only NONE ever means the requested ending happened."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from twopc.control import errors as e
from twopc.control.outcomes import (
    EndTxnRequest,
    OutcomeKind,
    TransactionDescription,
    TxnState,
    classify_end_txn,
)

requests = st.builds(EndTxnRequest, st.just("tx"), st.integers(0, 10), st.integers(0, 3),
                     st.booleans())
priors = st.one_of(st.none(), st.builds(
    TransactionDescription, st.just("tx"), st.sampled_from(list(TxnState)), st.integers(0, 10),
    st.integers(0, 3), st.just(60000), st.just(0), st.just(())))
codes = st.one_of(st.sampled_from(sorted(e.ERROR_NAMES)), st.integers(-1, 300))


@given(requests, codes, priors)
def test_only_none_confirms_the_requested_ending(req: EndTxnRequest, code: int,
                                                 prior: TransactionDescription | None) -> None:
    out = classify_end_txn(req, code, prior)
    requested = out.committed if req.commit else out.aborted
    assert requested == (code == e.NONE)


@given(requests, codes, priors)
def test_commit_is_only_reported_from_none_or_a_proven_prior(
        req: EndTxnRequest, code: int, prior: TransactionDescription | None) -> None:
    out = classify_end_txn(req, code, prior)
    if out.committed:
        assert code == e.NONE or (prior is not None and prior.state.committing
                                  and prior.holds(req.producer_id, req.epoch))


def test_classification_table() -> None:
    commit = EndTxnRequest("tx", 5, 1, True)
    ours = TransactionDescription("tx", TxnState.COMPLETE_COMMIT, 5, 1, 60000, 0, ())
    ongoing = TransactionDescription("tx", TxnState.ONGOING, 5, 1, 60000, 0, ())
    aborted = TransactionDescription("tx", TxnState.COMPLETE_ABORT, 5, 1, 60000, 0, ())
    bumped = TransactionDescription("tx", TxnState.COMPLETE_ABORT, 5, 2, 60000, 0, ())
    unknown = TransactionDescription("tx", TxnState.UNKNOWN_ID, -1, -1, -1, -1, ())
    c = e.ERROR_CODES
    table = [
        (commit, 0, ongoing, OutcomeKind.COMMITTED),
        (commit, 0, None, OutcomeKind.COMMITTED),
        (commit, 0, ours, OutcomeKind.ALREADY_COMMITTED),
        (EndTxnRequest("tx", 5, 1, False), 0, ongoing, OutcomeKind.ABORTED),
        (commit, c["INVALID_TXN_STATE"], aborted, OutcomeKind.ALREADY_ABORTED),
        (commit, c["INVALID_TXN_STATE"], bumped, OutcomeKind.INVALID_STATE),
        (commit, c["PRODUCER_FENCED"], bumped, OutcomeKind.UNCONFIRMED),
        (commit, c["INVALID_PRODUCER_EPOCH"], None, OutcomeKind.UNCONFIRMED),
        (commit, c["TRANSACTION_ABORTABLE"], None, OutcomeKind.UNCONFIRMED),
        (commit, c["CONCURRENT_TRANSACTIONS"], None, OutcomeKind.UNCONFIRMED),
        (commit, c["NETWORK_EXCEPTION"], None, OutcomeKind.UNCONFIRMED),
        (commit, c["INVALID_PRODUCER_ID_MAPPING"], ongoing, OutcomeKind.PRODUCER_ID_CHANGED),
        (commit, c["INVALID_PRODUCER_ID_MAPPING"], unknown, OutcomeKind.UNKNOWN_ID),
        (commit, c["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"], None, OutcomeKind.NOT_AUTHORIZED),
    ]
    for req, code, prior, kind in table:
        out = classify_end_txn(req, code, prior)
        assert out.kind is kind, (req, e.error_name(code), prior, out)
        if kind is OutcomeKind.UNCONFIRMED:
            assert out.error == e.error_name(code)


def test_error_table_and_retriable_sets() -> None:
    assert e.error_name(90) == "PRODUCER_FENCED"
    assert e.error_name(105) == "TRANSACTIONAL_ID_NOT_FOUND"
    assert e.error_name(120) == "TRANSACTION_ABORTABLE" and e.error_name(999) == "UNKNOWN_ERROR_999"
    assert e.is_retriable(e.ERROR_CODES["NOT_COORDINATOR"])
    assert e.is_retriable(e.ERROR_CODES["CONCURRENT_TRANSACTIONS"])
    assert not e.is_retriable(e.ERROR_CODES["PRODUCER_FENCED"])
    assert isinstance(e.api_error(53, "x"), e.NotAuthorizedError)
