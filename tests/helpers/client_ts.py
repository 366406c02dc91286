"""The TypeScript client (client-ts/) from pytest: built from its sources into a temporary
folder (never a stale build), and driven through ``client-ts/tools/drive.ts`` by a JSON script
(its steps are documented there). Fails, never skips, when Node.js or npm is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "client-ts"

__all__ = ["PACKAGE", "build_client_ts", "drive", "tool"]


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: the client-ts tests need Node.js 20+ and npm "
                    "(Debian: apt-get install nodejs npm)")
    return path


def build_client_ts(out: Path) -> Path:
    """client-ts compiled into ``out``; returns ``out``."""
    if not (PACKAGE / "node_modules" / "typescript").is_dir():
        subprocess.run([tool("npm"), "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                       cwd=PACKAGE, check=True)
    subprocess.run([tool("node"), str(PACKAGE / "node_modules" / "typescript" / "bin" / "tsc"),
                    "-p", str(PACKAGE / "tsconfig.json"), "--outDir", str(out)],
                   cwd=PACKAGE, check=True)
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
