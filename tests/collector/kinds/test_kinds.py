"""The estimate kinds' registry: what every kind declares holds for every mechanism of it.

Parametrized over the mechanism registry (through ``examples.EXAMPLES``) and over ``KINDS``,
so a kind or a mechanism added later is checked the same way without new test code.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from chorus_collector.cli.formatting import format_estimates
from chorus_collector.dashboard.pages import estimate_chart
from chorus_collector.estimators import Query, estimator_for
from chorus_collector.http.openapi import openapi_document
from chorus_collector.kinds import KINDS, Bars, EstimateKind, Histogram, kind_of, kind_of_answer
from chorus_shared import REGISTRY, Campaign, campaign_from_spec
from helpers.examples import EXAMPLES
from helpers.support import ADMIN_HEADERS, ANALYST_HEADERS, NOW, make_report

STRINGS = ["alpha", "beta", "gamma"]
TEMPLATES = Path(__file__).parents[3] / "collector" / "chorus_collector" / "dashboard" / "templates"


def _spec(mechanism: str) -> dict[str, Any]:
    spec = {"name": f"k-{mechanism.replace('_', '-')}", "mechanism": mechanism,
            **EXAMPLES[mechanism][0], "min_batch_size": 1}
    if spec.get("epsilon") is None:
        spec.pop("epsilon")
    return spec


def _value(domain: Any, rng: random.Random) -> Any:
    if isinstance(domain, list):
        return rng.choice(domain)
    if domain["kind"] == "strings":
        if "alphabet" in domain:
            return "".join(rng.choice(domain["alphabet"]) for _ in range(domain["max_bytes"]))
        return rng.choice(STRINGS)[:domain.get("max_bytes", 8)]
    if domain["kind"] == "vector":
        return {a["name"]: rng.uniform(a["lo"], a["hi"]) for a in domain["attributes"]}
    if domain["kind"] == "record":
        return {a["name"]: rng.choice(a["values"]) for a in domain["attributes"]}
    return rng.uniform(domain["lo"], domain["hi"])


def _candidates(campaign: Campaign) -> tuple[str, ...]:
    """Open strings are asked for candidates (a discovery campaign's second stage)."""
    kind = kind_of(campaign)
    if "candidates" not in kind.query_parameters(campaign):
        return ()
    size = getattr(campaign.domain, "max_bytes", None) or 8
    alphabet = getattr(campaign.domain, "alphabet", None)
    if alphabet:
        return tuple(dict.fromkeys(ch * size for ch in alphabet))
    return tuple(dict.fromkeys(s[:size] for s in STRINGS))


def test_every_mechanism_has_exactly_one_kind_and_it_is_registered() -> None:
    for name in REGISTRY:
        campaign = campaign_from_spec(_spec(name))
        applying = [kind.name for kind in KINDS.values() if kind.applies_to(campaign)]
        assert applying == [campaign.mechanism.estimate_kind], name
        assert kind_of(campaign).name == campaign.mechanism.estimate_kind


def test_every_kind_has_a_mechanism_and_is_paired_with_its_module_and_template() -> None:
    """A kind sits in ``kinds/<name>.py`` (the module named like the kind), has a dashboard
    template, and brings schemas no other kind brings."""
    used = {mechanism.estimate_kind for mechanism in REGISTRY.values()}
    assert set(KINDS) == used
    seen: set[str] = set()
    for name, kind in KINDS.items():
        assert kind.name == name
        assert type(kind).__module__ == f"chorus_collector.kinds.{name}"
        assert (TEMPLATES / kind.template).is_file(), kind.template
        assert not seen & set(kind.schemas), name
        seen |= set(kind.schemas)


@pytest.mark.parametrize("mechanism", sorted(REGISTRY))
def test_finalize_returns_the_answer_type_of_the_campaigns_kind(mechanism: str) -> None:
    campaign = campaign_from_spec(_spec(mechanism))
    rng = random.Random(7)
    domain = _spec(mechanism)["domain"]
    payloads = [json.loads(json.dumps(campaign.mechanism.randomize(
        campaign.mechanism.encode(_value(domain, rng)), rng))) for _ in range(200)]
    estimator = estimator_for(mechanism)
    state = estimator.map(campaign.mechanism, payloads)
    kind = kind_of(campaign)
    result = estimator.finalize(campaign, 200, np.asarray(state),
                                Query(candidates=_candidates(campaign)))
    assert isinstance(result, kind.answer_type)
    assert kind_of_answer(result) is kind
    assert result.to_json()["kind"] == kind.name


# -- served answers ----------------------------------------------------------------------------

def _numbers(body: Any) -> Iterator[float]:
    if isinstance(body, dict):
        for value in body.values():
            yield from _numbers(value)
    elif isinstance(body, list):
        for value in body:
            yield from _numbers(value)
    elif isinstance(body, float | int) and not isinstance(body, bool):
        yield float(body)


def _validate(value: Any, schema: dict[str, Any], schemas: dict[str, Any], where: str) -> None:
    """The subset of JSON Schema the document uses: $ref, type, enum, const, required,
    properties, items, oneOf, anyOf, allOf, minimum."""
    if "$ref" in schema:
        _validate(value, schemas[schema["$ref"].rsplit("/", 1)[1]], schemas, where)
        return
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        python = {"object": dict, "array": list, "string": str, "boolean": bool,
                  "null": type(None), "integer": int, "number": int | float}
        assert any(isinstance(value, python[n]) and not (n in ("integer", "number")
                                                          and isinstance(value, bool))
                   for n in names), f"{where}: {value!r:.60} is not {types}"
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
    if "const" in schema:
        assert value == schema["const"], where
    if "minimum" in schema and isinstance(value, int | float):
        assert value >= schema["minimum"], where
    for part in schema.get("allOf", ()):
        _validate(value, part, schemas, where)
    for key in ("oneOf", "anyOf"):
        if key in schema:
            passing = 0
            for option in schema[key]:
                try:
                    _validate(value, option, schemas, where)
                    passing += 1
                except AssertionError:
                    pass
            assert passing >= 1, f"{where}: no {key} option fits"
    if isinstance(value, dict):
        missing = set(schema.get("required", ())) - set(value)
        assert not missing, f"{where}: missing {sorted(missing)}"
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                _validate(value[name], sub, schemas, f"{where}.{name}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _validate(item, schema["items"], schemas, f"{where}[{i}]")


def _served(http: FlaskClient, mechanism: str) -> tuple[Campaign, dict[str, Any]]:
    spec = _spec(mechanism)
    reply = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert reply.status_code == 201, reply.get_json()
    config = reply.get_json()
    campaign = campaign_from_spec(spec)
    rng = random.Random(11)
    reports = [make_report(config, _value(spec["domain"], rng), rng, now=NOW - 3000)
               for _ in range(300)]
    assert http.post(f"/v1/campaigns/{spec['name']}/reports",
                     json={"reports": reports}).status_code == 200
    query = {"candidates": list(_candidates(campaign))} if _candidates(campaign) else {}
    answer = http.post(f"/v1/campaigns/{spec['name']}/estimates", json=query,
                       headers=ANALYST_HEADERS)
    assert answer.status_code == 200, answer.get_json()
    return campaign, answer.get_json()


@pytest.mark.parametrize("mechanism", sorted(REGISTRY))
def test_every_kinds_served_answer_is_described_labelled_tabled_and_drawn(
        http: FlaskClient, mechanism: str) -> None:
    campaign, answer = _served(http, mechanism)
    kind: EstimateKind = kind_of(campaign)
    assert answer["kind"] == kind.name

    # OpenAPI: the answer validates against its kind's schema, which the route's answer lists.
    document = openapi_document()
    schemas = document["components"]["schemas"]
    assert set(kind.schemas) <= set(schemas)
    _validate(answer, schemas[kind.answer_schema], schemas, kind.name)
    route = document["paths"]["/v1/campaigns/{name}/estimates"]["get"]["responses"]["200"]
    assert {"$ref": f"#/components/schemas/{kind.answer_schema}"} in \
        route["content"]["application/json"]["schema"]["oneOf"]

    # Labels and value estimates agree with each other and with the JSON answer.
    candidates = _candidates(campaign)
    labels = kind.labels(campaign, candidates)
    assert labels and len(set(labels)) == len(labels)
    numbers = set(_numbers(answer))
    estimates = _value_estimates_of(http, campaign, kind, candidates)
    assert set(labels) <= set(estimates)
    for label in labels:
        one = estimates[label]
        for x in (one.estimate, one.ci_low, one.ci_high):  # None: no interval (sw)
            assert x is None or not math.isfinite(x) or any(
                math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-15) for y in numbers), (label, x)

    # A terminal table under the header, and a chart the dashboard draws.
    table = format_estimates(answer).splitlines()
    assert table[0].startswith(f"{campaign.name}: {mechanism}")
    assert kind.table_lines(answer, None) and len(table) > 1
    assert isinstance(kind.chart(answer), Bars | Histogram)
    assert "<svg" in str(estimate_chart(answer))


def _value_estimates_of(http: FlaskClient, campaign: Campaign, kind: EstimateKind,
                        candidates: tuple[str, ...]) -> dict[str, Any]:
    """The kind's value estimates of the window the served answer covers."""
    from chorus_collector.analysis.windows import estimate_window

    app = http.application
    with app.app_context():
        storage = app.extensions["chorus.storage"]
        stored = storage.get_campaign(campaign.name)
        assert stored is not None
        result, _ = estimate_window(storage, stored, Query(candidates=candidates))
    return kind.value_estimates(result)
