"""The package as a newcomer installs it: a wheel built from this tree carries the Node hubs
and the presets with their teams, and an installed maple-async plays from another folder."""

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

import maple_async

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(maple_async.__file__).parent


def test_version_says_the_version_and_where_the_package_is():
    p = subprocess.run([sys.executable, "-m", "maple_async.cli", "--version"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"maple-async {maple_async.__version__} from {PACKAGE} (python 3."), p.stdout


def _wheel(tmp: Path) -> Path:
    """A wheel of this tree, built from a copy (the checkout gets no build/ folder) with the
    running venv's setuptools: no download."""
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "maple_async", src / "maple_async", ignore=shutil.ignore_patterns("__pycache__"))
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "-q", "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("maple_async-*.whl")
    return wheel


def _fresh_venv(where: Path) -> Path:
    """A new virtual environment that sees this one's packages (torch, poke-env, ...)
    through a .pth file instead of downloading them again; its own maple_async comes first."""
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    Path(site, "_parent_venv.pth").write_text("".join(f"{p}\n" for p in ours))
    return python


@pytest.mark.integration
def test_a_wheel_installed_in_a_fresh_venv_plays_from_another_folder(tmp_path):
    wheel = _wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {str(f.relative_to(ROOT)) for f in (ROOT / "maple_async").rglob("*")
               if f.suffix in (".py", ".js", ".yaml", ".txt") and "__pycache__" not in f.parts}
    assert not shipped - names, sorted(shipped - names)[:10]
    assert {"maple_async/simulator/simhub.js", "maple_async/stdin_lines.js", "maple_async/search/leafhub.js",
            "maple_async/presets/test.yaml", "maple_async/presets/teams/bss-heldout/lunala-balance.txt"} <= names

    python = _fresh_venv(tmp_path / "venv")
    # --ignore-installed: the parent venv's editable maple-async is visible through the .pth
    # file, and pip must neither count it as installed nor try to remove it.
    p = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "-q",
                        str(wheel)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    cli = str(python.parent / "maple-async")
    version = subprocess.run([cli, "--version"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert version.returncode == 0, version.stderr
    # the code that runs is the installed wheel's, not this checkout's
    assert version.stdout.startswith(f"maple-async {maple_async.__version__} from {site / 'maple_async'} "), \
        version.stdout
    play = subprocess.run([cli, "play", "--battles", "2", "--concurrency", "2", "--config", "test"],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert play.returncode == 0, play.stdout[-3000:] + play.stderr[-3000:]
    assert "simulator (" in play.stdout, play.stdout[-3000:]  # the default transport: the packaged simhub.js
    assert str(ROOT) not in play.stdout + play.stderr


def test_the_version_is_one_in_the_package_the_changelog_and_the_citation():
    """A release states its version once in code; the changelog's newest heading and the
    citation say the same (a wheel built before the bump would reuse a released number)."""
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    heading = next(line for line in (root / "CHANGELOG.md").read_text().splitlines() if line.startswith("## "))
    assert re.match(rf"## {re.escape(maple_async.__version__)} \(\d{{4}}-\d\d-\d\d\)$", heading), heading
    citation = (root / "CITATION.cff").read_text()
    assert f"\nversion: {maple_async.__version__}\n" in citation
