#!/usr/bin/env bash
# Installs everything twopc needs into .venv, from the project's own files: the Python packages
# (pyproject.toml), the test support that never ships with twopc (testing/pyproject.toml), and the embedded Kafka broker's jars (twopc/broker/pom.xml, via Maven, cached in
# ~/.cache/twopc). Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then PY=$candidate; break; fi
  done
fi
[ -n "$PY" ] || { echo "setup: no python3 found (3.10+ needed)" >&2; exit 1; }
command -v java >/dev/null || { echo "setup: java (17+) is needed for the embedded Kafka broker" >&2; exit 1; }
command -v mvn >/dev/null || { echo "setup: Maven is needed once to fetch the Kafka broker's jars" >&2; exit 1; }

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.twopc-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ testing/pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -U pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' -e ./testing
  touch "$stamp"
fi
# Every broker variant the tests use, fetched once into the cache.
.venv/bin/python -m twopc.broker.prefetch
