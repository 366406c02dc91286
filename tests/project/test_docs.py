"""The README starts a user and docs/ is the manual: the quick start, the settings, the
mechanisms, the API and error tables stay true, every example runs and every link resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chorus_collector.settings import SETTINGS, SettingsError, resolve_settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()
DEPLOYMENT = (DOCS / "deployment.md").read_text()
MECHANISMS = (DOCS / "mechanisms" / "README.md").read_text()
HTTP_API = (DOCS / "http-api.md").read_text()


def test_every_setting_is_documented_with_its_default() -> None:
    for setting in SETTINGS:
        row = next((line for line in DEPLOYMENT.splitlines()
                    if line.startswith(f"| `CHORUS_{setting.name}` |")), None)
        assert row is not None, f"CHORUS_{setting.name} is not in docs/deployment.md"
        default = "unset" if setting.default is None else str(setting.default)
        assert default in row


def test_every_mechanism_is_in_the_mechanisms_table() -> None:
    from chorus_shared import REGISTRY

    section = MECHANISMS.split("\n## Every mechanism\n", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    family_pages = "\n".join(page.read_text() for page in (DOCS / "mechanisms").glob("*.md")
                              if page.name != "README.md")
    for name in REGISTRY:
        assert re.search(rf"^\| [^|]*`{re.escape(name)}`", table, re.M), name
        assert re.search(rf"^\| `{re.escape(name)}` \|", family_pages, re.M), name


def test_quick_start_is_the_two_commands() -> None:
    block = README.split("```")[1]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make demo", "make test"]


def test_every_route_is_in_the_api_table(app: object) -> None:
    from flask import Flask

    assert isinstance(app, Flask)
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static" or rule.endpoint.startswith("dashboard."):
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)  # <int:id> too
        assert f"`{path}`" in HTTP_API or f"{path}`" in HTTP_API, path


def test_unknown_settings_fail_with_a_hint() -> None:
    with pytest.raises(SettingsError, match="did you mean 'ADMIN_TOKEN'"):
        resolve_settings(environ={"CHORUS_ADMN_TOKEN": "x"})
    with pytest.raises(SettingsError, match="must be an integer"):
        resolve_settings(environ={"CHORUS_WORKERS": "many"})
    with pytest.raises(SettingsError, match="unknown setting"):
        resolve_settings({"NOPE": 1}, environ={})
    assert resolve_settings({"WORKERS": 3}, environ={"CHORUS_WORKERS": "5"})["WORKERS"] == 3


THREAT_MODEL = (DOCS / "threat-model.md").read_text()
WORST_CASE_ROWS = [
    ("k-RR, ε = 1, default policy", {"epsilon": 1.0}),
    ("k-RR, ε = 1, lifetime budget 4", {"epsilon": 1.0, "privacy": {"budget": 4.0}}),
    ("k-RR, ε = 0.5, one report a day", {"epsilon": 0.5, "privacy": {"unit": "day"}}),
    ("k-RR, ε = 2, one report a day", {"epsilon": 2.0, "privacy": {"unit": "day"}}),
    ("k-RR, ε = 2, daily budget 10⁶",
     {"epsilon": 2.0, "privacy": {"unit": "day", "budget": 1e6, "max_reports": 10**6}}),
    ("k-RR, ε = 2, 4 days drawn in a year", {
        "epsilon": 2.0, "privacy": {"budget": 8.0},
        "schedule": {"cadence": "day", "start": "2026-01-01", "periods": 365}}),
]


@pytest.mark.parametrize(("label", "extra"), WORST_CASE_ROWS, ids=[r[0] for r in WORST_CASE_ROWS])
def test_the_threat_model_worst_case_table_is_computed(label: str,
                                                       extra: dict[str, object]) -> None:
    """Each row, recomputed from the campaign and the client's own caps."""
    from chorus_client import Client
    from chorus_shared import campaign_from_spec

    campaign = campaign_from_spec({"name": "x", "mechanism": "krr", "domain": ["a", "b", "c"],
                                   **extra}, warn=False)
    bound = Client("http://unused.test", ephemeral=True,
                   campaigns={"x": campaign}).worst_case("x")
    case = campaign.worst_case
    reports = round(bound.lifetime / bound.per_report)
    row = (f"| {label} | {campaign.policy.unit} | {case.per_report:g} | "
           f"{case.reports_per_period} | {case.per_period:g} | {case.per_year:,.6g} | "
           f"{bound.per_year:g} | {bound.lifetime:g} ({reports} report"
           f"{'s' if reports != 1 else ''}) |")
    assert row in THREAT_MODEL


def test_every_problem_kind_is_documented_and_every_raised_kind_is_catalogued() -> None:
    """One catalogue of error kinds: docs/http-api.md lists each with its status and title, and
    no code path raises a kind that is not in it (a scan of every literal kind)."""
    import ast

    from chorus_collector.problems import KINDS

    for kind, spec in KINDS.items():
        assert f"| `{kind}` | {spec.status} | {spec.title} |" in HTTP_API, kind
    root = ROOT / "collector" / "chorus_collector"
    raised: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            literals = [a.value for a in node.args
                        if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if name in ("Problem", "QueryError") and literals:
                raised.add(literals[0])
            elif name == "ReportStatus":
                raised.update(v for v in literals if "-" in v)
    assert len(raised) > 25
    assert raised <= set(KINDS), sorted(raised - set(KINDS))


DOC_PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
SKELETON = "<!-- a skeleton: checked for syntax, not run -->"


def _python_blocks() -> list[tuple[str, int, str, bool]]:
    """(page, index, code, skeleton) for every ```python block of the README and docs/."""
    blocks = []
    for page in DOC_PAGES:
        text = page.read_text()
        for index, match in enumerate(re.finditer(r"([^\n]*)\n```python\n(.*?)```", text,
                                                  re.S)):
            skeleton = match.group(1).rstrip().endswith(SKELETON)
            blocks.append((str(page.relative_to(ROOT)), index, match.group(2), skeleton))
    return blocks


def _shipped_configs() -> dict[str, dict[str, object]]:
    from chorus_shared import campaign_from_spec

    specs = {
        "browser": {"mechanism": "krr", "epsilon": 1.0,
                    "domain": {"kind": "categories", "values": ["chrome", "firefox", "other"],
                               "other": "other"}},
        "load_time": {"mechanism": "duchi", "epsilon": 1.0,
                      "domain": {"kind": "numeric", "lo": 0, "hi": 10}},
        "startup_seconds": {"mechanism": "duchi", "epsilon": 1.0,
                            "domain": {"kind": "numeric", "lo": 0, "hi": 60}},
        "editor_theme": {"mechanism": "krr", "epsilon": 1.0, "domain": ["light", "dark"]},
        "theme": {"mechanism": "krr", "epsilon": 1.0, "domain": ["light", "dark"]},
        "cli_command": {"mechanism": "krr", "epsilon": 1.0,
                        "domain": {"kind": "categories", "values": ["help", "run", "other"],
                                   "other": "other"}},
    }
    return {name: campaign_from_spec({"name": name, **spec}).public_config()
            for name, spec in specs.items()}


@pytest.mark.parametrize(("page", "index", "code", "skeleton"), _python_blocks(),
                         ids=lambda v: str(v)[:40] if isinstance(v, str | int) else "")
def test_the_python_blocks_of_the_docs_run(page: str, index: int, code: str, skeleton: bool,
                                           tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Every example in the README and docs/ runs as written, offline: the configs are
    shipped, so nothing is fetched, and reports are not due before their bucket ends."""
    import ast
    import json

    from chorus_client import Client

    ast.parse(code)
    if skeleton:
        return
    configs = _shipped_configs()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "chorus-campaigns.json").write_text(json.dumps(configs))
    namespace: dict[str, object] = {"SHIPPED_CONFIGS": configs, "CAMPAIGNS": configs,
                                    "STATE": tmp_path / "state", "__name__": "__docs__"}
    code = code.replace("/var/lib/", f"{tmp_path}/var/lib/")  # the example's app data
    try:
        exec(compile(code, f"{page}, block {index}", "exec"), namespace)
    finally:
        for value in namespace.values():
            if isinstance(value, Client):
                value.close(timeout=1)


def test_the_readme_stays_a_short_start() -> None:
    """The README starts a user; the reference lives in docs/."""
    assert len(README.splitlines()) < 300


FENCED = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?: \"[^\"]*\")?\)")


def _anchors(page: Path) -> set[str]:
    """The heading anchors GitHub gives a page: lower case, punctuation dropped, spaces to
    hyphens, a repeated heading numbered (-1, -2, ...)."""
    text = FENCED.sub("", page.read_text())
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.+?)[ #]*$", text, re.M):
        heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    """Links to files that exist, and anchors to headings that exist (code is skipped)."""
    text = re.sub(r"`[^`\n]*`", "", FENCED.sub("", page.read_text()))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        missing_anchor = bool(anchor) and linked.suffix == ".md" and linked.exists() \
            and anchor not in _anchors(linked)
        if not linked.exists() or missing_anchor:
            broken.append(target)
    assert not broken, broken


def test_the_docs_index_lists_every_page() -> None:
    index = (DOCS / "README.md").read_text()
    linked = {(DOCS / target).resolve() for target in LINK.findall(index)}
    pages = {page.resolve() for page in DOCS.rglob("*.md") if page != DOCS / "README.md"}
    assert not pages - linked, sorted(str(p.relative_to(ROOT)) for p in pages - linked)
