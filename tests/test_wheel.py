"""The wheel, installed as a user installs it: outside the repository, into a fresh virtual environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

from conftest import HANG_SECONDS

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_installs_and_runs_outside_the_repository(tmp_path):
    """Build the wheel, install it without its dependencies into a throw-away venv that sees this environment's
    packages (torch etc., not bnsym: a .pth adds site-packages as a plain path, so its editable-install hook does
    not run), then `import bnsym` and `bnsym predict` from a folder outside the repository."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(ROOT)], check=True, timeout=HANG_SECONDS, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("bnsym-*.whl")
    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "-q", str(wheel)], check=True, timeout=HANG_SECONDS, capture_output=True)
    outside = tmp_path / "work"
    outside.mkdir()
    where = subprocess.run([python, "-c", "import bnsym; print(bnsym.__file__)"], cwd=outside, check=True,
                           capture_output=True, text=True).stdout
    assert Path(where.strip()).is_relative_to(env)
    fresh = {**os.environ, "BNSYM_CACHE_DIR": str(tmp_path / "cache")}  # the installed theory computes the answer
    done = subprocess.run([env / "bin" / "bnsym", "predict", "--phi", "gelu", "--batch-size", "8", "--json"],
                          cwd=outside, capture_output=True, text=True, timeout=HANG_SECONDS, env=fresh)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["gradient_rate"] > 1
    assert list((tmp_path / "cache" / "predict").glob("*.json"))  # and kept it
