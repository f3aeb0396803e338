"""Crash points for the crash tests: never set TWOPC_CRASH_AT outside tests.

With ``TWOPC_CRASH_AT=checkpoint.<step>`` the process kills itself with SIGKILL when it reaches
that step, so a test can prove that a write cut at that point leaves no record or a whole one.

Every test hook of twopc (this one, and those of ``twopc/crashpoints.py``: TWOPC_CRASH_AT,
TWOPC_PAUSE_AT, TWOPC_CLOCK_SKEW_MS) acts only when a second variable, ``TWOPC_TEST_HOOKS``, holds
exactly :data:`TEST_HOOKS_VALUE` as well: a production deployment that inherits a hook variable by
accident (a copied environment, a leftover export) gets a warning on logger ``twopc`` and the hook
is ignored. The test harness (tests/conftest.py) and ``twopc demo`` set both.

Design: docs/design.md section 6.
"""

from __future__ import annotations

import logging
import os
import signal

ENV = "TWOPC_CRASH_AT"
TEST_HOOKS_VAR = "TWOPC_TEST_HOOKS"
TEST_HOOKS_VALUE = "crash-points-for-tests-only"

_log = logging.getLogger("twopc")
_warned: set[str] = set()


def hooks_enabled(hook_var: str) -> bool:
    """Whether the test hook set in ``hook_var`` may act: only with the test-hooks gate set too.
    A hook variable set without the gate is ignored, with one warning per variable and process."""
    if os.environ.get(TEST_HOOKS_VAR) == TEST_HOOKS_VALUE:
        return True
    if hook_var not in _warned:
        _warned.add(hook_var)
        _log.warning(
            "%s=%r is set but ignored: it is a test hook (it kills, pauses or skews this process) "
            "and acts only with %s=%s as well; unset %s in a production environment",
            hook_var, os.environ.get(hook_var), TEST_HOOKS_VAR, TEST_HOOKS_VALUE, hook_var)
    return False


def crash_point(step: str) -> None:
    """SIGKILL this process if the crash hook names ``checkpoint.<step>`` (and the gate is set)."""
    if os.environ.get(ENV) == f"checkpoint.{step}" and hooks_enabled(ENV):
        os.kill(os.getpid(), signal.SIGKILL)
