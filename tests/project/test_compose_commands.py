"""Every ``docker compose`` command the docs show works as written: Compose interpolates the
whole file whatever the profile, so each command must set every variable the file requires
(``${NAME:?message}``), or the reader meets "required variable … is missing"."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
PAGES = [ROOT / "README.md", COMPOSE, *sorted((ROOT / "docs").glob("*.md"))]
_REQUIRED = re.compile(r"\$\{([A-Z0-9_]+):\?")
#: a shell line that runs Compose: assignments, then ``docker compose``
_COMMAND = re.compile(r"^([A-Z0-9_]+=\S*\s+)*docker compose\b")


def required_variables() -> set[str]:
    return set(_REQUIRED.findall(COMPOSE.read_text()))


def compose_commands(text: str) -> list[list[str]]:
    """Each shell command that runs ``docker compose``, as words, continuation lines joined
    (a YAML comment's ``#`` taken off) and ``a && b`` split in two."""
    lines = [re.sub(r"^\s*#\s?", "", line) for line in text.splitlines()]
    logical: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    commands = []
    for line in logical:
        for part in line.split("&&"):
            part = part.split("#", 1)[0].strip()  # a trailing comment
            if _COMMAND.match(part):  # a command line, not prose that names one
                commands.append(shlex.split(part))
    return commands


def test_the_compose_file_requires_the_collector_tokens() -> None:
    assert required_variables() >= {"CHORUS_ADMIN_TOKEN", "CHORUS_ANALYST_TOKEN",
                                    "CHORUS_METRICS_TOKEN"}


def test_every_documented_compose_command_sets_every_required_variable() -> None:
    required = required_variables()
    checked = 0
    for page in PAGES:
        for words in compose_commands(page.read_text()):
            start = words.index("docker")
            assigned = {word.split("=", 1)[0] for word in words[:start] if "=" in word}
            missing = required - assigned
            assert not missing, (f"{page.relative_to(ROOT)}: `{' '.join(words)}` fails as "
                                 f"written: Compose needs {sorted(missing)}")
            checked += 1
    assert checked >= 6  # the plain, shuffler, PostgreSQL and Dask commands at least


def test_the_parser_sees_a_missing_token() -> None:
    words = compose_commands("# CHORUS_ADMIN_TOKEN=x \\\n#   docker compose up -d && "
                             "docker compose run --rm aggregate\n")
    assert [w[:2] for w in words] == [["CHORUS_ADMIN_TOKEN=x", "docker"],
                                      ["docker", "compose"]]
