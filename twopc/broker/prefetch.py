"""`python -m twopc.broker.prefetch`: resolve every broker variant's jars now (setup and CI do this once).

Design: docs/design.md section 7.
"""

from __future__ import annotations

import sys

from twopc.broker.artifacts import kafka_classpath, kafka_tools_classpath
from twopc.broker.spec import DEFAULT_KAFKA_VERSION, VARIANTS


def main() -> int:
    for version in sorted({spec.kafka_version for spec in VARIANTS.values()}):
        print(f"Apache Kafka {version}: {kafka_classpath(version)}")
    # The tests that act as an operator (an outside abort) run Kafka's own tools.
    print(f"Apache Kafka's tools {DEFAULT_KAFKA_VERSION}: {kafka_tools_classpath(DEFAULT_KAFKA_VERSION)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
