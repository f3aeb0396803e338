"""The `twopc.spark` package: its names come from their modules on first use, so that a Spark
executor's Python worker (which imports the package to unpickle the writer) never imports the
driver side, and no process imports urllib.request unless it fetches an OAuth token."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import twopc.spark

# What a worker must not have imported after `twopc.spark.source` and the task's own modules.
_DRIVER_ONLY = ("twopc.spark.foreach_batch", "twopc.spark.jobs", "twopc.spark.listener",
                "twopc.driver.coordinator", "twopc.driver.recovery", "urllib.request")


def _imported_after(*modules: str) -> set[str]:
    code = ("import importlib, json, sys\n"
            f"for m in {list(modules)!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return set(json.loads(out.stdout))


def test_an_executor_worker_imports_no_driver_side() -> None:
    loaded = _imported_after("twopc.spark.source", "twopc.spark.task", "twopc.executor.writer",
                             "twopc.log.gate", "twopc.control.client")
    assert "twopc.spark.source" in loaded  # the test looked at the right process
    assert not loaded & set(_DRIVER_ONLY), sorted(loaded & set(_DRIVER_ONLY))


@pytest.mark.parametrize("name", twopc.spark.__all__)
def test_every_public_name_is_its_modules_object(name: str) -> None:
    home = importlib.import_module(f"twopc.spark.{twopc.spark._HOMES[name]}")
    assert getattr(twopc.spark, name) is getattr(home, name)
    assert name in dir(twopc.spark)


def test_the_public_names_are_the_homes_names() -> None:
    assert sorted(twopc.spark.__all__) == sorted(twopc.spark._HOMES)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'ExactlyOnce'"):
        twopc.spark.ExactlyOnce  # noqa: B018
    with pytest.raises(ImportError):
        from twopc.spark import ExactlyOnce  # type: ignore[attr-defined]  # noqa: F401
