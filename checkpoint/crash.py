"""Crash points for the crash tests: never set TWOPC_CRASH_AT outside tests.

With ``TWOPC_CRASH_AT=checkpoint.<step>`` the process kills itself with SIGKILL when it reaches
that step, so a test can prove that a write cut at that point leaves no record or a whole one.
"""

from __future__ import annotations

import os
import signal

ENV = "TWOPC_CRASH_AT"


def crash_point(step: str) -> None:
    """SIGKILL this process if the crash hook names ``checkpoint.<step>``."""
    if os.environ.get(ENV) == f"checkpoint.{step}":
        os.kill(os.getpid(), signal.SIGKILL)
