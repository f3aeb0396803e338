"""Issue 33, the kafka2pc options as a careless user writes them: every value either gives a
config the protocol can run with, or an OptionError naming the option and what to change.
No upper bound was checked before (a timeout of 2**31 reached librdkafka as a negative number,
slotsPerPartition=10**9 built range(10**9) per task, a margin at or above the timeout failed every
batch after writing), a misspelt namespace was ignored, a relative checkpoint path accepted."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twopc.spark.errors import OptionError
from twopc.spark.options import (
    DEFAULT_MARGIN_MS,
    MAX_SLOTS,
    MAX_TIMEOUT_MS,
    MIN_TIMEOUT_MS,
    parse_options,
)

BASE = {"kafka.bootstrap.servers": "b:9092", "twopc.checkpoint": "/data/chk/q1",
        "twopc.transactionalIdPrefix": "orders"}
NUMERIC = ("twopc.transactionTimeoutMs", "twopc.slotsPerPartition", "twopc.commitMarginMs",
           "twopc.taskBudgetMs")
FIX_WORDS = ("must", "give", "remove", "use", "set", "raise", "lower", "did you mean", "is for",
             "is required", "is empty", "is not allowed")

numbers = (st.integers(-(2**70), 2**70).map(str)
           | st.sampled_from(["", " ", "1e3", "2.5", "nan", "inf", "-0", "0x10", "1_000", "٣٠٠٠",
                              str(2**31), str(2**31 - 1), str(10**9), "60000", "5000", "4999"]))


def _check(options: dict[str, str]) -> None:
    try:
        config = parse_options({k.lower(): v for k, v in options.items()}, streaming=True)
    except OptionError as exc:
        text = str(exc)
        named = [k for k in options if k.lower() in text.lower()]
        assert named, f"{text!r} names no option"
        assert any(w in text for w in FIX_WORDS), f"{text!r} says nothing to do"
        return
    assert MIN_TIMEOUT_MS <= config.transaction_timeout_ms <= MAX_TIMEOUT_MS
    assert 2 <= config.slots <= MAX_SLOTS
    margin = DEFAULT_MARGIN_MS if config.margin_ms is None else config.margin_ms
    assert 0 <= margin < config.transaction_timeout_ms
    if config.budget_ms is not None:
        assert 1 <= config.budget_ms <= config.transaction_timeout_ms - margin
    assert config.checkpoint_url.startswith("/") or "://" in config.checkpoint_url


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.sampled_from(NUMERIC), numbers, min_size=1))
def test_numeric_options(values: dict[str, str]) -> None:
    _check({**BASE, **values})


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["relative/chk", "./chk", "chk", "file://relative/chk", "~/chk",
                        "file:relative", " /data/x", "/data/x", "s3://b/x", "file:///data/x"]))
def test_checkpoint_must_be_absolute(url: str) -> None:
    _check({**BASE, "twopc.checkpoint": url})


def test_relative_checkpoint_is_refused() -> None:
    for url in ("relative/chk", "./chk", "file://relative/chk"):
        with pytest.raises(OptionError, match="absolute"):
            parse_options({**BASE, "twopc.checkpoint": url}, streaming=True)


@pytest.mark.parametrize("name", [
    "twpc.transactionTimeoutMs", "twopc.transactionTimeoutMS2", "twopc_transactionTimeoutMs",
    "two-pc.checkpoint", "twopc.checkpont", "kafak.bootstrap.servers", "kafka_sasl.password",
    "twopc.slotsperpartition ", "TWPC.JOBID", "twopc.commitMarginMillis"])
def test_a_misspelt_option_is_refused_with_a_suggestion(name: str) -> None:
    with pytest.raises(OptionError, match=r"unknown option.*(did you mean|twopc's options)"):
        parse_options({**{k.lower(): v for k, v in BASE.items()}, name.lower(): "1"},
                      streaming=True)


def test_sparks_own_options_pass() -> None:
    for name in ("queryName", "path", "checkpointLocation", "maxOffsetsPerTrigger", "mode"):
        parse_options({**BASE, name.lower(): "x" if name != "checkpointLocation" else "/c"},
                      streaming=True)


@pytest.mark.parametrize(("values", "needle"), [
    ({"twopc.transactionTimeoutMs": str(2**31)}, "at most 2147483647"),
    ({"twopc.slotsPerPartition": str(10**9)}, f"at most {MAX_SLOTS}"),
    ({"twopc.commitMarginMs": "60000"}, "below twopc.transactionTimeoutMs"),
    ({"twopc.transactionTimeoutMs": "4000"}, "twopc.commitMarginMs"),
    ({"twopc.taskBudgetMs": "59000"}, "twopc.taskBudgetMs"),
    ({"topic": "orders events"}, "not a Kafka topic name"),
    ({"topic": "x" * 250}, "not a Kafka topic name"),
    ({"topic": ".."}, "not a Kafka topic name"),
])
def test_bounds_name_the_fix(values: dict[str, str], needle: str) -> None:
    with pytest.raises(OptionError, match=needle):
        parse_options({**BASE, **{k.lower(): v for k, v in values.items()}}, streaming=True)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=30), st.text(max_size=20), max_size=6))
def test_arbitrary_option_maps(extra: dict[str, str]) -> None:
    _check({**BASE, **extra})


def test_the_default_margin_is_the_coordinators() -> None:
    from twopc.driver.call import DriverSettings

    assert DriverSettings.__dataclass_fields__["margin_ms"].default == DEFAULT_MARGIN_MS
