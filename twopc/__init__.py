"""twopc: exactly-once writes from Apache Spark to Apache Kafka by two-phase commit."""

__version__ = "0.1.0"
