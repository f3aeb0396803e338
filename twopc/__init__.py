"""twopc: exactly-once writes from Apache Spark to Apache Kafka by two-phase commit.

Design: docs/design.md section 7.
"""

__version__ = "0.1.0"
