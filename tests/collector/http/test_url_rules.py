"""The app's URL rules compile their URL builders on first use, and build what werkzeug's own
rules build (collector/chorus_collector/app.py, ``_LazyRule``)."""

from __future__ import annotations

from typing import Any

from flask import Flask
from werkzeug.routing import Map, Rule

import chorus_collector.app as app_module


def _sample_values(rule: Rule) -> dict[str, Any]:
    return {name: (7 if "int" in type(rule._converters[name]).__name__.lower() else f"x{i}")
            for i, name in enumerate(sorted(rule.arguments))}


def test_every_rule_builds_the_url_werkzeugs_own_rule_builds(app: Flask) -> None:
    rules = list(app.url_map.iter_rules())
    assert len(rules) > 40 and all(isinstance(r, app_module._LazyRule) for r in rules)
    plain = Map([Rule(r.rule, endpoint=r.endpoint, methods=r.methods, defaults=r.defaults)
                 for r in rules])
    adapter = app.url_map.bind("collector.test")
    plain_adapter = plain.bind("collector.test")
    for rule in rules:
        values = _sample_values(rule)
        for extra in ({}, {"unknown": "a b"}):  # the second appends a query string
            got = adapter.build(rule.endpoint, {**values, **extra},
                                method=sorted(rule.methods or {"GET"})[0])
            want = plain_adapter.build(rule.endpoint, {**values, **extra},
                                       method=sorted(rule.methods or {"GET"})[0])
            assert got == want, (rule.rule, got, want)


def test_a_builder_is_compiled_when_first_used_not_when_the_rule_is_added(
        monkeypatch: Any, app: Flask) -> None:
    compiled: list[str] = []
    original = Rule._compile_builder

    def counting(rule: Rule, append_unknown: bool = True) -> Any:
        compiled.append(rule.rule)
        return original(rule, append_unknown)

    monkeypatch.setattr(Rule, "_compile_builder", counting)
    url_map = Map([app_module._LazyRule("/v1/campaigns/<name>", endpoint="one"),
                   app_module._LazyRule("/v1/other", endpoint="two")])
    assert compiled == []
    adapter = url_map.bind("collector.test")
    assert adapter.build("one", {"name": "a"}) == "/v1/campaigns/a"
    assert adapter.build("one", {"name": "b"}) == "/v1/campaigns/b"
    assert compiled == ["/v1/campaigns/<name>"]  # once, and only the rule used
