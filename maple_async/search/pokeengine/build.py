"""poke-engine, built once per generation into the project's home.

poke-engine is published as an sdist that cargo compiles for one generation per build (a cargo
feature), and every build is a module named ``poke_engine``. The sdist is downloaded once,
unpacked and mended (:mod:`.mend`: the end of a turn in Showdown's order), and each generation's
build lives in a folder of its own, ``<home>/poke-engine-<version>-<mend>/gen<N>/``, put on ``sys.path`` by
the engine worker of that generation only (:mod:`.worker`): one process can search gen 4 and
then gen 9, each in its own worker, without reinstalling anything. The cargo target folder is
shared by the builds, so a second generation recompiles the engine, not its dependencies.

An interrupted build is never mistaken for a finished one (the folder is renamed into place
when complete) and several processes may ask at once (a file lock).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Iterable, Optional

from ...errors import UserError
from ...server import default_home
from . import mend

ENGINE_VERSION = "0.0.48"
GENERATIONS = tuple(range(1, 10))
# What a build takes on the 2-core machine, for the progress line.
BUILD_MINUTES = "2-5"


class EngineUnavailable(UserError, RuntimeError):
    """poke-engine cannot be built or loaded here; the message names what to install."""


def feature(gen: int) -> str:
    """The cargo feature of a generation: gen 9 is the terastallization build."""
    if gen not in GENERATIONS:
        raise EngineUnavailable(f"poke-engine has no generation {gen} (it builds 1-9)")
    return "poke-engine/terastallization" if gen == 9 else f"poke-engine/gen{gen}"


def engine_root(home: Optional[Path] = None) -> Path:
    return (Path(home) if home else default_home()) / f"poke-engine-{ENGINE_VERSION}-{mend.REVISION}"


def engine_dir(gen: int, home: Optional[Path] = None) -> Path:
    """The folder that holds generation ``gen``'s ``poke_engine`` package."""
    return engine_root(home) / f"gen{gen}"


def installed(gen: int, home: Optional[Path] = None) -> bool:
    return (engine_dir(gen, home) / "poke_engine" / "__init__.py").exists()


def cargo() -> Optional[str]:
    """cargo on PATH or where rustup puts it."""
    found = shutil.which("cargo")
    if found:
        return found
    rustup = Path.home() / ".cargo" / "bin" / "cargo"
    return str(rustup) if rustup.exists() else None


def ensure(gen: int, home: Optional[Path] = None, quiet: bool = False) -> Path:
    """Generation ``gen``'s engine folder, built first if it is not there."""
    if installed(gen, home):
        return engine_dir(gen, home)
    return build(gen, home, quiet)


def build(gen: int, home: Optional[Path] = None, quiet: bool = False) -> Path:
    """Compile poke-engine for ``gen`` (pip and cargo) into its folder; returns the folder."""
    flag = feature(gen)
    root = engine_root(home)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        final = engine_dir(gen, home)
        if installed(gen, home):
            return final
        tool = cargo()
        if tool is None:
            raise EngineUnavailable(
                "search.engine poke-engine needs Rust's cargo to build the engine once: install it "
                "(https://rustup.rs, or Debian's package cargo) and run again; search.engine showdown "
                "needs nothing more")
        env = env_for(tool, root)
        src = mended_source(root, env)
        tmp = root / f".gen{gen}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        log_path = root / f"build-gen{gen}.log"
        # pip's wheel cache does not key on config settings: a cached build of another
        # generation would be taken for this one.
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-cache-dir", "--target", str(tmp),
               str(src), "--config-settings", f"build-args=--features {flag} --no-default-features"]
        t0 = time.perf_counter()
        if not quiet:
            print(f"[maple-async] building poke-engine {ENGINE_VERSION} (mend {mend.REVISION}) for generation {gen} "
                  f"(cargo, once; about {BUILD_MINUTES} minutes; log {log_path}) ...", flush=True)
        with open(log_path, "w") as log:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        if proc.returncode != 0 or not (tmp / "poke_engine" / "__init__.py").exists():
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            shutil.rmtree(tmp, ignore_errors=True)
            raise EngineUnavailable(
                f"building poke-engine {ENGINE_VERSION} for generation {gen} failed (exit "
                f"{proc.returncode}; log {log_path}): {' | '.join(tail)}")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        if not quiet:
            print(f"[maple-async]   done in {time.perf_counter() - t0:.0f} s", flush=True)
        return final


def env_for(tool: str, root: Path) -> dict:
    env = dict(os.environ)
    env["CARGO_TARGET_DIR"] = str(root / "target")  # shared: dependencies compile once
    env["PATH"] = f"{Path(tool).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def mended_source(root: Path, env: dict) -> Path:
    """The pinned sdist unpacked and mended, once (``<root>/src``); the caller holds the lock."""
    final = root / "src"
    if (final / mend.FILE).exists():
        return final
    sdists = root / "sdist"
    tarball = sdists / f"poke_engine-{ENGINE_VERSION}.tar.gz"
    if not tarball.exists():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(sdists),
               f"poke-engine=={ENGINE_VERSION}"]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
        if proc.returncode != 0 or not tarball.exists():
            tail = " | ".join(proc.stdout.strip().splitlines()[-3:])
            raise EngineUnavailable(f"downloading poke-engine {ENGINE_VERSION}'s source failed "
                                    f"(exit {proc.returncode}): {tail}")
    tmp = root / ".src.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(tarball) as tar:
        tar.extractall(tmp, filter="data")
    [top] = list(tmp.iterdir())  # poke_engine-<version>/
    try:
        mend.apply(top)
    except mend.MendError as e:
        raise EngineUnavailable(f"poke-engine {ENGINE_VERSION}'s source cannot be mended: {e}") from e
    shutil.rmtree(final, ignore_errors=True)
    os.replace(top, final)
    shutil.rmtree(tmp, ignore_errors=True)
    return final


def build_all(gens: Iterable[int], home: Optional[Path] = None, quiet: bool = False) -> list[Path]:
    return [ensure(g, home, quiet) for g in gens]
