"""Guards at start (docs/design.md section 4, guard 1), run on the driver before the first task writes.

The cluster checks are the driver's (`twopc.driver.startup_guards.check_at_start`); this adds what
only the Spark options can tell: a producer setting that librdkafka refuses, and a source that is
not rate-limited.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException, Producer

from twopc.control import ControlClient
from twopc.driver import startup_guards
from twopc.protocol.pool import transactional_id
from twopc.spark.errors import OptionError
from twopc.spark.options import RATE_LIMITED, TIMEOUT, SinkConfig

_log = logging.getLogger(__name__)


def check_producer_config(config: SinkConfig) -> None:
    """A bad `kafka.*` option fails here, once, on the driver, rather than in every task: the
    producer is made as the tasks make theirs (transactional, so idempotent: librdkafka then
    refuses acks other than all), and dropped unused."""
    from twopc.executor.producer import transactional_producer_config
    from twopc.executor.write_errors import WriterConfigError

    try:
        Producer(transactional_producer_config(
            config.producer_config, transactional_id(config.prefix, 0, 0),
            config.transaction_timeout_ms))
    except (KafkaException, WriterConfigError) as exc:
        detail = exc.args[0] if exc.args else exc
        raise OptionError(f"a kafka.* option is not valid for the producer: {detail}") from None


def check_at_start(config: SinkConfig, *, streaming: bool) -> None:
    check_producer_config(config)
    with ControlClient(config.control_config()) as control:
        startup_guards.check_at_start(control, config.producer_config, config.transaction_timeout_ms)
    if streaming and not config.source_rate_limited:
        _log.warning(
            "twopc: a transaction stays open for the whole micro-batch plus its commit (%s=%d ms). "
            "Rate-limit the source (maxOffsetsPerTrigger / maxFilesPerTrigger) so that the first batch "
            "after an outage cannot outgrow the timeout, then set %s=true to silence this warning",
            TIMEOUT, config.transaction_timeout_ms, RATE_LIMITED,
        )
