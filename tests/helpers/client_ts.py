"""The TypeScript client (client-ts/) for tests that run it: its dev dependencies installed
once from the committed lockfile (under a lock: pytest-xdist workers share the folder), and
builds into a test's own folder, so that no test reads a stale build."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "client-ts"


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


def compiled(out: Path) -> Path:
    """The package compiled by tsc into ``out`` (its src/, test/ and tools/ as .js)."""
    modules = installed()
    subprocess.run([tool("node"), str(modules / "typescript" / "bin" / "tsc"),
                    "-p", str(PACKAGE / "tsconfig.json"), "--outDir", str(out)],
                   cwd=PACKAGE, check=True)
    return out


def browser_bundle(out: Path) -> Path:
    """The browser bundle (src/browser.ts, minified ESM) exactly as ``npm run bundle`` builds
    it (its arguments read from package.json), written to ``out`` instead of dist/."""
    modules = installed()
    script = json.loads((PACKAGE / "package.json").read_text())["scripts"]["bundle"].split()
    assert script[0] == "esbuild", script
    target = out / "chorus.min.js"
    arguments = [a if not a.startswith("--outfile=") else f"--outfile={target}"
                 for a in script[1:]]
    subprocess.run([str(modules / ".bin" / "esbuild"), *arguments], cwd=PACKAGE, check=True)
    return target
