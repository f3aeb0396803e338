"""What a reused Python worker keeps from one call to the next: opened logs and control clients,
and the driver's and executors' tools opened over them.

PySpark reuses its Python workers (spark.python.worker.reuse, the default), on the driver across
micro-batches and on executors from task to task. Opening a log probes the backend's conditional
create (two writes and a delete), and a control client holds connections and cached coordinators
and leaders: both are kept here for the next call of the same process. Only a speed-up: every call
still reads the log afresh, a client that failed a call is closed and replaced, and a forked child
never reuses its parent's client.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from checkpoint import Log
    from twopc.control import ControlClient
    from twopc.driver.call import DriverSettings
    from twopc.driver.coordinator import Coordinator
    from twopc.driver.lease import JobLeases
    from twopc.driver.recovery import Recovery
    from twopc.log.gate import Gate
    from twopc.protocol.owner import Owner
    from twopc.spark.options import SinkConfig

_shared_lock = threading.Lock()
_logs: dict[str, Log] = {}
_clients: dict[str, tuple[int, ControlClient]] = {}


def _log_key(config: SinkConfig) -> str:
    return json.dumps([config.checkpoint_url, config.storage_options,
                       config.allow_unconditional_create], sort_keys=True, default=str)


def _log_for(config: SinkConfig) -> Log:
    from checkpoint import open_log

    key = _log_key(config)
    with _shared_lock:
        log = _logs.get(key)
    if log is None:
        log = open_log(config.checkpoint_url, config.storage_options,
                       allow_unconditional_create=config.allow_unconditional_create)
        with _shared_lock:
            _logs[key] = log
    return log


def client_for(config: SinkConfig) -> ControlClient:
    """This process's kept client for `config`, taken (one call at a time uses a client), or a new
    one; give it back with `release_client`."""
    from twopc.control import ControlClient

    key = json.dumps(config.control_config(), sort_keys=True)
    with _shared_lock:
        found = _clients.pop(key, None)
    if found is not None and found[0] == os.getpid():
        return found[1]
    return ControlClient(config.control_config())  # (a forked child never reuses its parent's)


def release_client(config: SinkConfig, client: ControlClient, *, healthy: bool) -> None:
    """Keep `client` for the next call, unless the call failed (its connections may be what
    failed) or another client is kept already: then it is closed."""
    key = json.dumps(config.control_config(), sort_keys=True)
    if healthy:
        with _shared_lock:
            if key not in _clients:
                _clients[key] = (os.getpid(), client)
                return
    client.close()


@atexit.register
def _close_kept_clients() -> None:
    """At interpreter exit, close this process's kept clients: their connections' reader tasks
    then end with their event loop, instead of asyncio printing "Task was destroyed but it is
    pending!" for each when the interpreter tears the loop's thread down (every batch-job
    driver did, after its job had committed)."""
    with _shared_lock:
        kept = [client for pid, client in _clients.values() if pid == os.getpid()]
        _clients.clear()
    for client in kept:
        with contextlib.suppress(Exception):
            client.close()


@dataclass(frozen=True)
class DriverSide:
    """What one driver-side call of a Spark entry point uses, over one log and one control
    client: the commit and abort, the recovery, the log's read-only gate, and the lease of a
    batch job family's log."""

    coordinator: Coordinator
    recovery: Recovery
    gate: Gate
    leases: JobLeases


def open_gate(config: SinkConfig, owner: Owner) -> Gate:
    """An executor's view of the log: is the batch committed, which slot may a task take. It reads
    the log only: no control connection."""
    from twopc.log.gate import Gate

    return Gate(_log_for(config), owner)


def _settings(config: SinkConfig, owner: Owner) -> DriverSettings:
    from twopc.driver.call import DriverSettings
    from twopc.protocol.copies import RepairSettings

    # Copy-forward's transactions are the sink's: its producer settings and timeout.
    repair = RepairSettings(config.repair_policy, dict(config.producer_config),
                            config.transaction_timeout_ms)
    settings = DriverSettings(owner, repair=repair, slots=config.slots,
                              full_sweep_interval_ms=config.full_sweep_interval_ms)
    return settings if config.margin_ms is None else replace(settings, margin_ms=config.margin_ms)


@contextmanager
def driver_side(config: SinkConfig, owner: Owner) -> Iterator[DriverSide]:
    """The driver's tools for one call; its control client is kept for the next call of this
    process unless the call failed (then it is closed: its connections may be what failed)."""
    from twopc.driver.coordinator import Coordinator
    from twopc.driver.lease import JobLeases
    from twopc.driver.recovery import Recovery
    from twopc.log.gate import Gate

    log = _log_for(config)
    client = client_for(config)
    settings = _settings(config, owner)
    healthy = False
    try:
        yield DriverSide(Coordinator(log, client, settings), Recovery(log, client, settings),
                         Gate(log, owner), JobLeases(log, settings))
        healthy = True
    finally:
        release_client(config, client, healthy=healthy)
        if not healthy:  # open it again next time (a storage problem probes again)
            with _shared_lock:
                _logs.pop(_log_key(config), None)
