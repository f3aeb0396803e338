"""The `twopc.spark` package: its names come from their modules on first use, so that a Spark
executor's Python worker (which imports the package to unpickle the writer) never imports the
driver side, and no process imports urllib.request unless it fetches an OAuth token."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import twopc.spark

INIT = Path(twopc.spark.__file__)

# What a worker must not have imported after `twopc.spark.source` and the task's own modules.
_DRIVER_ONLY = ("twopc.spark.foreach_batch", "twopc.spark.jobs", "twopc.spark.listener",
                "twopc.driver.coordinator", "twopc.driver.recovery", "urllib.request")


def _python(code: str) -> str:
    """What `code` prints in a fresh interpreter."""
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True).stdout


def _imported_after(*modules: str) -> set[str]:
    return set(json.loads(_python("import importlib, json, sys\n"
                                  f"for m in {list(modules)!r}: importlib.import_module(m)\n"
                                  "print(json.dumps(sorted(sys.modules)))\n")))


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


def test_the_type_checkers_imports_are_the_homes() -> None:
    """Type checkers see the names only through the TYPE_CHECKING imports (the lazy __getattr__
    is hidden from them): a name in `_HOMES` without its import there would go unchecked."""
    tree = ast.parse(INIT.read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If)
                 and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING")
    seen = {alias.name: str(imp.module).rpartition(".")[2] for imp in block.body
            if isinstance(imp, ast.ImportFrom) for alias in imp.names}
    assert seen == twopc.spark._HOMES


def test_the_packages_modules_are_attributes_as_before() -> None:
    """`import twopc.spark` then `twopc.spark.errors.JournalError` (a documented error that is
    not among the package's names) works as when the package imported every module."""
    code = ("import twopc.spark, sys\n"
            "assert 'twopc.spark.errors' not in sys.modules\n"
            "print(twopc.spark.errors.JournalError.__name__, twopc.spark.driver.__name__)\n")
    assert _python(code).split() == ["JournalError", "twopc.spark.driver"]
