"""`twopc demo`: the README's main command.

Runs a streaming Spark job (JSON files -> Kafka, one file per micro-batch) through kafka2pc, kills the
driver with SIGKILL in the middle of a commit, restarts it from the same checkpoints, lets recovery
finish, and audits the topic as a read_committed consumer: every record exactly once, none missing,
no open transaction. With --sink kafka the same job and the same kind of kill go through Spark's
built-in Kafka writer instead, and the audit shows the duplicates that exactly-once prevents.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from twopc.broker import DEFAULT_VARIANT, VARIANTS, BrokerError
from twopc.cli._common import integer
from twopc.cli._output import emit_json, fail

EPILOG = """exit codes: 0 the demo showed what it promises (kafka2pc: the audit passed; --sink kafka: the
audit found the duplicates); 1 it did not; 2 bad arguments, a broker or driver that could not run.

examples:
  twopc demo
  twopc demo --kill-at coordinator.after_endtxn_1 --records 4000 --batches 4
  twopc demo --sink kafka            # Spark's built-in sink: duplicates after the same kill
  twopc demo --bootstrap-servers 127.0.0.1:9092 --json
"""


def register(sub: Any) -> None:
    from twopc.demo.run import KILL_POINTS, SINKS

    p = sub.add_parser(
        "demo", help="kill a streaming Spark job mid-commit, restart it, and audit: exactly once",
        description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--bootstrap-servers", help="an existing cluster (default: start the embedded one)")
    p.add_argument("--variant", default=DEFAULT_VARIANT, choices=sorted(VARIANTS),
                   help=f"the embedded broker's variant (default {DEFAULT_VARIANT})")
    p.add_argument("--records", type=integer(1, 10**8, "a number of records"), default=2000,
                   help="records in all (default 2000)")
    p.add_argument("--batches", type=integer(1, 10_000, "a number of batches"), default=5,
                   help="micro-batches, one source file each (default 5)")
    p.add_argument("--kill-batch", type=integer(0, 10_000, "a batch"), default=2,
                   help="the micro-batch whose commit is killed (default 2)")
    p.add_argument("--kill-at", default="coordinator.after_intent", choices=KILL_POINTS,
                   metavar="POINT", help="the commit step where the driver is killed (kafka2pc; "
                   f"default coordinator.after_intent; one of {', '.join(KILL_POINTS)})")
    p.add_argument("--sink", default="kafka2pc", choices=SINKS,
                   help="kafka2pc (default) or Spark's built-in kafka writer, for comparison")
    p.add_argument("--workdir", type=Path, default=None,
                   help="keep the source and checkpoints here (default: a temporary directory, "
                   "removed after a successful run)")
    p.add_argument("--json", action="store_true",
                   help="print the summary as JSON on stdout (the narration goes to stderr)")
    p.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from twopc.broker.under_test import KafkaUnderTest, start_kafka
    from twopc.demo.run import Demo, DemoConfig, DemoError

    out = sys.stderr if args.json else sys.stdout

    def say(msg: str) -> None:
        print(f"[demo] {msg}", file=out, flush=True)

    config = DemoConfig(records=args.records, batches=args.batches, kill_batch=args.kill_batch,
                        kill_at=args.kill_at, sink=args.sink, workdir=args.workdir)
    try:
        config.check()
        jars = _spark_kafka_jars(say) if args.sink == "kafka" else None
        if args.bootstrap_servers:
            kafka = KafkaUnderTest("external", args.bootstrap_servers)
        else:
            say(f"starting the embedded Apache Kafka broker ({args.variant}) ...")
            kafka = start_kafka(args.variant)
            say(f"broker up in {kafka.startup_seconds:.1f}s at {kafka.bootstrap_servers}")
    except (DemoError, BrokerError) as exc:
        return fail(str(exc), 2)
    demo = None
    try:
        demo = Demo(kafka, config, say, jars)
        outcome = demo.run()
    except (DemoError, KafkaException) as exc:
        where = f" (work directory kept: {demo.workdir})" if demo is not None else ""
        return fail(f"{exc}{where}", 2)
    finally:
        kafka.stop()
    for line in outcome.summary_lines():
        say(line)
    if args.sink == "kafka" and outcome.passed:
        say("the built-in sink wrote the killed batch twice: these duplicates are the expected "
            "outcome, and what kafka2pc prevents (run `twopc demo` to see it)")
    if not outcome.passed:
        say(f"the work directory is kept for inspection: {outcome.workdir}")
    demo.cleanup()
    if args.json:
        emit_json(outcome.as_dict())
    return 0 if outcome.passed else 1


def _spark_kafka_jars(say: Any) -> list[str]:
    from twopc.broker.artifacts import spark_kafka_jars

    say("resolving Spark's Kafka package (spark-sql-kafka-0-10) ...")
    jars = spark_kafka_jars()
    say(f"... {len(jars)} jars: {', '.join(p.rsplit('/', 1)[-1] for p in jars)}")
    return jars
