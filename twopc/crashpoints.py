"""Named crash points: tests make a process kill itself at an exact protocol step.

Set ``TWOPC_CRASH_AT`` to a point's name (for tests only); when the code reaches
``crash_point(name)`` with that name the process sends itself SIGKILL, so no
``finally``, ``atexit`` or librdkafka destructor runs, as in a real power loss.
"""

from __future__ import annotations

import os
import signal

ENV_VAR = "TWOPC_CRASH_AT"


def crash_point(name: str) -> None:
    """Kill this process with SIGKILL if ``TWOPC_CRASH_AT`` names this point."""
    if os.environ.get(ENV_VAR) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def armed(prefix: str = "") -> bool:
    """True if a crash point starting with ``prefix`` is armed.

    Lets a caller change its order of operations (e.g. send one EndTxn alone)
    only when a test needs a crash to fall between two answers.
    """
    target = os.environ.get(ENV_VAR)
    return target is not None and target.startswith(prefix)
