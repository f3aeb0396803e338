"""Injected request faults in the control client, for tests only (issue 30, item 7).

A fault hits one kind of request (API key), optionally only those for one transactional id, and
optionally only some of the matching ones (skip the first `skip`, then fire `count` times):

- `drop_request`: the request is never written; the caller waits `delay_s`, then its connection
  breaks (BrokerConnectionError), as after a request lost on the way. The broker did nothing.
- `drop_answer`: the request is written and answered, the answer is thrown away; after `delay_s`
  the connection breaks. The broker acted, the caller cannot know it.
- `delay`: the request is written `delay_s` late (the caller waits for it), then answered normally.

The seam is `BrokerConnection.request` (connection.py): every request of the client passes `pick`,
and a chosen fault is carried out by `apply`. The transactional id of a request is read from its
body for the APIs whose body starts with it (`TXN_ID_FIRST`).

Switching it on:

- in-process (a test): ``with injected(FaultPlan((Fault("END_TXN", Action.DROP_REQUEST,
  transactional_id=tid),))) as plan: ...``; `plan.fired` lists what fired;
- another process (a driver or worker a test starts, and kills): write the plan with
  `write_control(path, plan)` and start the process with BOTH environment variables
  ``TWOPC_CONTROL_FAULTS=<path>`` and ``TWOPC_TEST_HOOKS=crash-points-for-tests-only`` (exactly
  that value: the one switch of every test hook, checkpoint/crash.py). The file is re-read when
  it changes (a test may switch faults while the child runs); no file means no fault. With `log`
  set in the plan, each firing is appended to that file as one JSON line (`read_fired`).

Why production cannot switch it on by accident: nothing in twopc calls `install`; the file path
alone does nothing without the arming variable with its exact value (a path without it is ignored,
with one warning); the subprocess helpers of the tests strip every TWOPC_* variable they do not set
explicitly; and an armed process logs an ERROR line once, naming the file, so that a fault
injector that ever runs outside a test shows in its log. When neither an installed plan nor the
file variable is present, `pick` costs one environment lookup.

Design: docs/design.md section 3.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, TypeVar

from checkpoint.crash import TEST_HOOKS_VALUE, TEST_HOOKS_VAR
from twopc.control.errors import BrokerConnectionError, ControlError
from twopc.control.messages import ApiKey, is_flexible
from twopc.control.protocol import Reader

T = TypeVar("T")
log = logging.getLogger("twopc.control.faults")

CONTROL_ENV = "TWOPC_CONTROL_FAULTS"
# One switch arms every test hook of twopc (crash points, pauses, clock skew, these faults).
ARM_ENV = TEST_HOOKS_VAR
ARM_VALUE = TEST_HOOKS_VALUE

# The APIs whose request body starts with the transactional id (classic or compact string).
TXN_ID_FIRST = frozenset({ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN,
                          ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT})


class Action(str, Enum):
    DROP_REQUEST = "drop_request"
    DROP_ANSWER = "drop_answer"
    DELAY = "delay"


@dataclass(frozen=True)
class Fault:
    api: str  # an ApiKey name: "END_TXN", "ADD_PARTITIONS_TO_TXN", ...
    action: Action
    transactional_id: str | None = None  # only requests for this id (APIs of TXN_ID_FIRST)
    skip: int = 0  # the first `skip` matching requests of this process pass untouched
    count: int | None = None  # then it fires this many times (None: on every later match)
    delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.api not in ApiKey.__members__:
            raise ValueError(f"unknown API {self.api!r}; use one of {sorted(ApiKey.__members__)}")
        if self.transactional_id is not None and ApiKey[self.api] not in TXN_ID_FIRST:
            raise ValueError(f"{self.api} requests name no single transactional id")
        if self.skip < 0 or (self.count is not None and self.count < 0) or self.delay_s < 0:
            raise ValueError("skip, count and delay_s must not be negative")
        object.__setattr__(self, "action", Action(self.action))


@dataclass(frozen=True)
class Fired:
    api: str
    transactional_id: str | None
    action: str
    pid: int


@dataclass
class FaultPlan:
    faults: tuple[Fault, ...]
    log: str | None = None  # a file each firing is appended to (JSON lines), for other processes
    fired: list[Fired] = field(default_factory=list)  # this process's firings
    _seen: list[int] = field(default_factory=list, repr=False)  # matches so far, per fault
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def choose(self, api: ApiKey, version: int, body: bytes) -> Fault | None:
        """The first fault that fires for this request (and count it), or None."""
        tid: str | None = None
        parsed = False
        with self._lock:
            if len(self._seen) != len(self.faults):
                self._seen = [0] * len(self.faults)
            for i, f in enumerate(self.faults):
                if f.api != api.name:
                    continue
                if f.transactional_id is not None:
                    if not parsed:
                        tid, parsed = transactional_id_of(api, version, body), True
                    if tid != f.transactional_id:
                        continue
                self._seen[i] += 1
                n = self._seen[i] - f.skip
                if n >= 1 and (f.count is None or n <= f.count):
                    if not parsed:
                        tid, parsed = transactional_id_of(api, version, body), True
                    self._record(Fired(api.name, tid, f.action.value, os.getpid()))
                    return f
        return None

    def _record(self, fired: Fired) -> None:
        self.fired.append(fired)
        if self.log:
            with open(self.log, "a") as out:
                out.write(json.dumps(asdict(fired)) + "\n")


def transactional_id_of(api: ApiKey, version: int, body: bytes) -> str | None:
    """The transactional id a request body names (None for other APIs or an unreadable body)."""
    if api not in TXN_ID_FIRST:
        return None
    try:
        return Reader(body, flexible=is_flexible(api, version)).nullable_string()
    except ControlError:
        return None


# ---- switching on -------------------------------------------------------------------------------

_installed: FaultPlan | None = None
_from_file: tuple[str, float, FaultPlan] | None = None  # (path, mtime, plan)
_warned: set[str] = set()
_file_lock = threading.Lock()


def install(plan: FaultPlan) -> None:
    """Use `plan` in this process (tests only) until `uninstall()`."""
    global _installed
    _installed = plan


def uninstall() -> None:
    global _installed
    _installed = None


@contextlib.contextmanager
def injected(plan: FaultPlan) -> Iterator[FaultPlan]:
    install(plan)
    try:
        yield plan
    finally:
        uninstall()


def pick(api: ApiKey, version: int, body: bytes) -> Fault | None:
    """The fault to apply to this request, if a plan is installed or armed (else None)."""
    plan = _installed
    if plan is None:
        path = os.environ.get(CONTROL_ENV)
        if not path:
            return None
        plan = _plan_from_file(path)
        if plan is None:
            return None
    return plan.choose(api, version, body)


def _plan_from_file(path: str) -> FaultPlan | None:
    global _from_file
    if os.environ.get(ARM_ENV) != ARM_VALUE:
        _warn_once(f"unarmed:{path}", logging.WARNING,
                   f"{CONTROL_ENV}={path} is ignored: fault injection is for tests only and needs "
                   f"{ARM_ENV}={ARM_VALUE}")
        return None
    _warn_once(f"armed:{path}", logging.ERROR,
               f"FAULT INJECTION ARMED ({ARM_ENV}): control-client requests fail on purpose as "
               f"{path} says; this must never happen outside a test")
    try:
        mtime = os.stat(path).st_mtime
    except FileNotFoundError:
        return None
    with _file_lock:
        if _from_file is None or _from_file[0] != path or _from_file[1] != mtime:
            _from_file = (path, mtime, read_control(path))
        return _from_file[2]


def _warn_once(key: str, level: int, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.log(level, message)


def write_control(path: str, plan: FaultPlan | Sequence[Fault]) -> None:
    """Atomically write the control file a subprocess reads (TWOPC_CONTROL_FAULTS)."""
    p = plan if isinstance(plan, FaultPlan) else FaultPlan(tuple(plan))
    obj: dict[str, Any] = {"log": p.log, "faults": [
        {**asdict(f), "action": f.action.value} for f in p.faults]}
    temp = f"{path}.tmp-{uuid.uuid4().hex}"
    with open(temp, "w") as out:
        json.dump(obj, out)
    os.replace(temp, path)


def read_control(path: str) -> FaultPlan:
    with open(path) as f:
        obj = json.load(f)
    return FaultPlan(tuple(Fault(**x) for x in obj.get("faults", ())), obj.get("log"))


def read_fired(path: str) -> list[Fired]:
    """The firings other processes appended to a plan's `log` file."""
    try:
        with open(path) as f:
            return [Fired(**json.loads(line)) for line in f if line.strip()]
    except FileNotFoundError:
        return []


# ---- carrying a fault out (connection.py) -------------------------------------------------------


async def apply(fault: Fault, api: ApiKey, where: str, send: Callable[[], Awaitable[T]],
                fail: Callable[[BaseException], None]) -> T:
    """Carry `fault` out on one request: `send` writes it and waits for its answer, `fail` breaks
    the connection (failing every request in flight on it, as a real timeout does)."""
    if fault.action is Action.DELAY:
        await asyncio.sleep(fault.delay_s)
        return await send()
    if fault.action is Action.DROP_ANSWER:
        await send()  # the broker acted; its answer is lost
    await asyncio.sleep(fault.delay_s)
    exc = BrokerConnectionError(f"{api.name} to {where}: injected fault {fault.action.value}"
                                f"{'' if fault.action is Action.DROP_ANSWER else ' (not sent)'}")
    fail(exc)
    raise exc
