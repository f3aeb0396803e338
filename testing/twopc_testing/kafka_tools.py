"""Kafka's own command-line tools, run as an operator would run them (`kafka-transactions.sh`).

The tests use them for what twopc must survive from outside: an operator who finds a hanging
transaction (its partition's last stable offset stuck below the high watermark) and aborts it with
the tool Kafka documents for that, whatever the transaction held. The tools' jars come from Maven
Central (twopc/broker/tools-pom.xml, `kafka_tools_classpath`); the JVM is the `java` on PATH.
"""

from __future__ import annotations

import shutil
import subprocess

from twopc.broker.artifacts import kafka_tools_classpath
from twopc.broker.spec import DEFAULT_KAFKA_VERSION


def kafka_transactions(bootstrap: str, *args: str, kafka_version: str = DEFAULT_KAFKA_VERSION,
                       timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    """`kafka-transactions.sh --bootstrap-server BOOTSTRAP ARGS...`; AssertionError with its
    output if it fails."""
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java is not on PATH: Kafka's tools need a JVM")
    cmd = [java, "-Xmx256m", "-cp", kafka_tools_classpath(kafka_version),
           "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"kafka-transactions.sh {' '.join(args)} failed (exit "
                             f"{proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    return proc


def abort_hanging(bootstrap: str, topic: str, partition: int, start_offset: int) -> str:
    """`kafka-transactions.sh abort --topic T --partition P --start-offset O`: the operator's abort
    of the open transaction whose first record in that partition is at O (the tool finds its
    producer with DescribeProducers and writes an ABORT marker to the partition). Returns the
    tool's output."""
    proc = kafka_transactions(bootstrap, "abort", "--topic", topic, "--partition", str(partition),
                              "--start-offset", str(start_offset))
    return proc.stdout + proc.stderr
