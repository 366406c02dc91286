"""The TypeScript client (client-ts/) from pytest: its dev dependencies installed once from the
committed lockfile (under a lock: pytest-xdist workers share the folder), built from its
sources into a test's own folder (never a stale build), bundled for the browser, and driven
through ``client-ts/tools/drive.ts`` by a JSON script (its steps are documented there). Fails,
never skips, when Node.js or npm is missing."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "client-ts"

__all__ = ["PACKAGE", "browser_bundles", "build_client_ts", "drive", "installed", "stored_state",
           "tool"]


def tool(name: str) -> str:
    """``node`` or ``npm``; fails (never skips) when the machine lacks it."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: the client-ts tests need Node.js 20+ and npm "
                    "(Debian: apt-get install nodejs npm)")
    return path


def installed() -> Path:
    """client-ts's node_modules, installed by ``npm ci`` if missing (``make test`` has already)."""
    modules = PACKAGE / "node_modules"
    with open(PACKAGE / "package-lock.json") as lockfile:
        fcntl.flock(lockfile, fcntl.LOCK_EX)
        try:
            if not (modules / "typescript").is_dir() or not (modules / "esbuild").is_dir():
                subprocess.run([tool("npm"), "ci", "--no-audit", "--no-fund",
                                "--loglevel=error"], cwd=PACKAGE, check=True)
        finally:
            fcntl.flock(lockfile, fcntl.LOCK_UN)
    return modules


def build_client_ts(out: Path) -> Path:
    """client-ts compiled by tsc into ``out`` (its src/, test/ and tools/ as .js); returns it."""
    modules = installed()
    subprocess.run([tool("node"), str(modules / "typescript" / "bin" / "tsc"),
                    "-p", str(PACKAGE / "tsconfig.json"), "--outDir", str(out)],
                   cwd=PACKAGE, check=True)
    return out


def browser_bundles(out: Path) -> Path:
    """The browser bundles (chorus.min.js, chorus-full.min.js) exactly as ``npm run bundle``
    builds them (its arguments read from package.json), written to ``out`` instead of dist/."""
    modules = installed()
    script = json.loads((PACKAGE / "package.json").read_text())["scripts"]["bundle"].split()
    assert script[0] == "esbuild", script
    arguments = [a if not a.startswith("--outdir=") else f"--outdir={out}" for a in script[1:]]
    subprocess.run([str(modules / ".bin" / "esbuild"), *arguments], cwd=PACKAGE, check=True)
    return out


def drive(build: Path, work: Path, script: dict[str, Any], *,
          timeout: float = 300) -> dict[str, Any]:
    """Runs one driver script; returns ``{"results": [...], "log": [...]}``."""
    work.mkdir(parents=True, exist_ok=True)
    script_file, out_file = work / "script.json", work / "out.json"
    script_file.write_text(json.dumps(script))
    run = subprocess.run([tool("node"), str(build / "tools" / "drive.js"), str(script_file),
                          str(out_file)], capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-4000:]
    result: dict[str, Any] = json.loads(out_file.read_text())
    return result


# Opens the state with the client's own FileStore (the snapshot with its journal replayed) and
# prints it as JSON: what a restarted client would hold.
_READ_STATE = """
const { FileStore } = await import(process.argv[1]);
const store = await FileStore.open(process.argv[2]);
process.stdout.write(JSON.stringify(await store.read((state) => state)));
await store.close();
"""


def stored_state(build: Path, path: Path) -> dict[str, Any]:
    """The client state a FileStore at ``path`` holds (its snapshot and journal together)."""
    run = subprocess.run([tool("node"), "--input-type=module", "-e", _READ_STATE,
                          str(build / "src" / "node.js"), str(path)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-4000:]
    state: dict[str, Any] = json.loads(run.stdout)
    return state
