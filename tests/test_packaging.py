"""twopc's distribution: `python -m build` prints no setuptools deprecation, the wheel holds twopc
and checkpoint (with the broker's Maven files) and nothing of the test-only twopc_testing, and its
metadata pins pandas to what PySpark supports."""

from __future__ import annotations

import re
import zipfile
from email.parser import Parser
from importlib.metadata import requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.wheel_build import Built, build_twopc


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_twopc(tmp_path_factory.mktemp("build"))


def test_the_build_prints_no_deprecation(built: Built) -> None:
    warnings = [line for line in built.output.splitlines()
                if re.search(r"deprecat|SetuptoolsWarning|BuildBackendWarning", line, re.I)]
    assert not warnings, "\n".join(warnings)


def test_the_wheel_holds_twopc_and_checkpoint_only(built: Built) -> None:
    names = zipfile.ZipFile(built.wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"twopc", "checkpoint", built.wheel.name.split("-py3")[0] + ".dist-info"}, tops
    for needed in ("twopc/spark/source.py", "twopc/py.typed", "twopc/broker/pom.xml",
                   "twopc/broker/spark-kafka-pom.xml", "checkpoint/log.py", "checkpoint/py.typed"):
        assert needed in names, needed
    assert not [n for n in names if "twopc_testing" in n or n.startswith("tests/")]


def test_the_metadata(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as wheel:
        meta_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(wheel.read(meta_name).decode())
    assert meta["License-Expression"] == "Apache-2.0"
    deps = {Requirement(r).name: Requirement(r) for r in meta.get_all("Requires-Dist")
            if "extra ==" not in r}
    pandas = deps["pandas"].specifier
    # PySpark warns on every run under pandas 3 ("does not yet fully support pandas >= 3.0.0"):
    # twopc keeps pandas below it, and its minimum is PySpark's declared one.
    assert not pandas.contains("3.0.0") and pandas.contains("2.3.3")
    pyspark_needs = next(Requirement(r).specifier for r in requires("pyspark") or []
                         if Requirement(r).name == "pandas")
    for version in ("2.1.4", "2.2.0", "2.3.3"):  # PySpark's minimum, ours alike
        assert pandas.contains(version) == pyspark_needs.contains(version), (version, pandas)
    assert Path(built.sdist).name == built.wheel.name.split("-py3")[0] + ".tar.gz"
