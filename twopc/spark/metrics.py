"""The metrics exporter in a Spark driver: `twopc.metricsPort`, served by TwopcProgressListener.

kafka2pc's commits run in driver-side Python workers that come and go; the exporter needs a process
that lives as long as the query: the driver's own, where the listener is made. It watches what the
query's options name: the cluster (`kafka.*`), the topic (`topic`; without it, the topics the log's
batches wrote) and the checkpoint log with its journal (`twopc.checkpoint`, `twopc.storage*`). The
exporter itself is twopc/ops/metrics.py, the same as `twopc metrics` runs standalone.

Design: docs/design.md section 7.
"""

from __future__ import annotations

from twopc.ops.metrics import MetricsServer, Target, serve
from twopc.spark.errors import OptionError
from twopc.spark.options import METRICS_PORT, SinkConfig


def metrics_target(config: SinkConfig) -> Target:
    return Target(config.control_config(), (config.topic,) if config.topic else (),
                  config.checkpoint_url, config.storage_options)


def start_metrics(config: SinkConfig) -> MetricsServer | None:
    """Serve the query's metrics on `twopc.metricsPort` (every interface); None without it."""
    if config.metrics_port is None:
        return None
    try:
        return serve(metrics_target(config), config.metrics_port)
    except OSError as exc:
        raise OptionError(
            f"option {METRICS_PORT}={config.metrics_port}: cannot listen there ({exc}): give each "
            "query's listener a port of its own (0: any free port, then listener.metrics.port)"
        ) from exc
