#!/usr/bin/env bash
# The default test suite (what CI runs): every unit test, lint and types, the integration tests on the
# default broker (Kafka 4.x, transaction version 2), and the tests marked all_variants on Kafka 4.x TV0
# and 3.9 as well. The full matrix (every test on every variant) is `TWOPC_MATRIX=full bash scripts/test.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
