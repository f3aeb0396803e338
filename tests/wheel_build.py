"""twopc's distribution built as a user builds it (`python -m build`), for the packaging test and
the Spark cluster tests (which ship this wheel to their executors, as README.md says).

Built offline from a copy of the checkout (`--no-isolation`: this environment's setuptools and
build, from the test extra), so that nothing lands in the working tree (build/, *.egg-info).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path
    output: str  # what the build printed (stdout and stderr): setuptools' warnings land here


def build_twopc(out: Path) -> Built:
    """`python -m build --no-isolation` of twopc: the sdist, then the wheel built from it."""
    src = out / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for package in ("twopc", "checkpoint"):
        shutil.copytree(REPO / package, src / package, ignore=ignore)
    dist = out / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)],
        capture_output=True, text=True,
    )
    wheels = sorted(dist.glob("twopc-*.whl"))
    sdists = sorted(dist.glob("twopc-*.tar.gz"))
    if built.returncode != 0 or len(wheels) != 1 or len(sdists) != 1:
        raise RuntimeError(f"python -m build of twopc failed ({built.returncode}): "
                           f"{(built.stdout + built.stderr)[-3000:]}")
    return Built(wheels[0], sdists[0], built.stdout + built.stderr)
