"""The torture suites. Run standalone (`python -m tests.torture`) they arm twopc's test hooks
themselves, as tests/conftest.py does under pytest (checkpoint/crash.py: TWOPC_TEST_HOOKS)."""

import os

from twopc.crashpoints import TEST_HOOKS_VALUE, TEST_HOOKS_VAR

os.environ[TEST_HOOKS_VAR] = TEST_HOOKS_VALUE
