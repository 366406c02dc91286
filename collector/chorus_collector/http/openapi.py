"""The OpenAPI 3.1 description of the collector's HTTP API, served at ``GET /openapi.json``.

Kept true by the tests: every route of the app is described here and every path described
here is a route (``tests/collector/http/test_openapi.py``), and schemathesis sends generated
requests to every operation, checking each answer against its description.
"""

from __future__ import annotations

from typing import Any

from chorus_collector.ingest.shuffled_batches import SHUFFLED_BATCH_HEADER, SHUFFLED_SENDERS_HEADER
from chorus_collector.kinds import KINDS as ESTIMATE_KINDS
from chorus_collector.problems import KINDS, MEDIA_TYPE, PROBLEM_BASE
from chorus_collector.version import VERSION

__all__ = ["openapi_document"]

JSON = "application/json"

_HEX32 = "^[0-9a-f]{32}$"
_HEX64 = "^[0-9a-f]{64}$"
_NAME = "^[a-z0-9][a-z0-9_.-]{0,63}$"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def _problems(*statuses: int) -> dict[str, Any]:
    """Every refusal is an RFC 9457 problem document; the statuses an operation can answer."""
    answers = {}
    for status in statuses:
        kinds = sorted(name for name, kind in KINDS.items() if kind.status == status)
        answers[str(status)] = {
            "description": "refused: " + ", ".join(kinds) if kinds else "refused",
            "content": {MEDIA_TYPE: {"schema": _ref("Problem")}}}
    return answers


#: The estimate kinds whose answers share the one-table envelope ``Estimate``; the others
#: have a schema of their own (``EstimateKind.answer_schema``).
_ENVELOPED = [kind.name for kind in ESTIMATE_KINDS.values()
              if kind.answer_schema == "Estimate"]
#: What an estimates route answers: each kind's answer schema, once.
_ANSWERS = [_ref(name) for name in dict.fromkeys(kind.answer_schema
                                                 for kind in ESTIMATE_KINDS.values())]
_ESTIMATE_KINDS = {"enum": list(ESTIMATE_KINDS)}
_ALIGN = ('"exact" (the default): start and end must fall on the time precision; "outer": '
          "start is rounded down and end up to whole points of the step, for a dashboard's "
          "time range (Grafana: docs/grafana.md)")

# Answers any route can give: a missing or wrong token where one is needed, a proxy's limits
# and a busy database.
_COMMON = (400, 401, 403, 404, 405, 408, 413, 414, 415, 429, 431, 503)

_SCHEMAS: dict[str, Any] = {
    "Problem": {
        "type": "object",
        "description": "An RFC 9457 problem document; `type` ends with the problem's kind.",
        "required": ["type", "title", "status"],
        "properties": {
            "type": {"type": "string", "pattern": f"^{PROBLEM_BASE}[a-z-]+$"},
            "title": {"type": "string"},
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "detail": {"type": "string"},
        },
    },
    "Annotation": {
        "type": "object", "required": ["id", "time", "text", "campaign", "created_at"],
        "properties": {
            "id": {"type": "integer"},
            "time": {"type": "integer", "minimum": 0, "description": "Unix seconds"},
            "text": {"type": "string", "maxLength": 200},
            "campaign": {"type": ["string", "null"],
                         "description": "the campaign it marks; null: every campaign"},
            "created_at": {"type": "number"}}},
    "AnnotationList": {
        "type": "object", "required": ["annotations"],
        "properties": {"annotations": {"type": "array", "items": _ref("Annotation")}}},
    "NewAnnotation": {
        "type": "object", "required": ["time", "text"], "additionalProperties": False,
        "properties": {
            "time": {"type": "integer", "minimum": 0, "maximum": 2**40 - 1},
            "text": {"type": "string", "minLength": 1, "maxLength": 200},
            "campaign": {"type": "string",
                         "description": "a campaign's name; left out: every campaign"}}},
    "SavedList": {
        "type": "object",
        "required": ["id", "campaign", "name", "candidates", "created_at", "link"],
        "properties": {
            "id": {"type": "integer"}, "campaign": {"type": "string"},
            "name": {"type": "string", "maxLength": 100},
            "candidates": {"type": "array", "items": {"type": "string"}},
            "created_at": {"type": "number"},
            "link": {"type": "string", "description": "the dashboard page asked with it"}}},
    "SavedListList": {
        "type": "object", "required": ["lists"],
        "properties": {"lists": {"type": "array", "items": _ref("SavedList")}}},
    "NewSavedList": {
        "type": "object", "required": ["name", "candidates"], "additionalProperties": False,
        "description": "saving under a name the campaign has replaces that list's strings",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 100},
            "candidates": {"type": "array", "minItems": 1,
                           "items": {"type": "string", "minLength": 1}}}},
    "SavedView": {
        "type": "object",
        "required": ["id", "campaign", "name", "query", "created_at", "link"],
        "properties": {
            "id": {"type": "integer"}, "campaign": {"type": "string"},
            "name": {"type": "string", "maxLength": 100},
            "query": {"type": "string", "description": "the campaign page's query string"},
            "created_at": {"type": "number"},
            "link": {"type": "string", "description": "the dashboard page that asks it"}}},
    "SavedViewList": {
        "type": "object", "required": ["views"],
        "properties": {"views": {"type": "array", "items": _ref("SavedView")}}},
    "BoardSummary": {
        "type": "object", "required": ["id", "name", "created_at"],
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"},
                       "created_at": {"type": "number"}}},
    "BoardList": {
        "type": "object", "required": ["boards"],
        "properties": {"boards": {"type": "array", "items": _ref("BoardSummary")}}},
    "Board": {
        "type": "object", "required": ["id", "name", "created_at", "panels"],
        "properties": {
            "id": {"type": "integer"}, "name": {"type": "string"},
            "created_at": {"type": "number"},
            "panels": {"type": "array", "items": {
                "type": "object", "required": ["id", "campaign", "section", "view"],
                "properties": {
                    "id": {"type": "integer"}, "campaign": {"type": "string"},
                    "section": {"enum": ["estimates", "series"]},
                    "view": {"type": ["integer", "null"],
                             "description": "a saved view's id; null: the page's defaults"}}}}}},
    "NewBoard": {
        "type": "object", "required": ["name"], "additionalProperties": False,
        "description": "a name a board has already answers that board",
        "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 100}}},
    "NewPanel": {
        "type": "object", "required": ["campaign", "section"], "additionalProperties": False,
        "properties": {
            "campaign": {"type": "string"}, "section": {"enum": ["estimates", "series"]},
            "view": {"type": "integer", "description": "one of the campaign's saved views"}}},
    "Health": {
        "type": "object",
        "required": ["status", "version"],
        "properties": {"status": {"const": "ok"}, "version": {"type": "string"}},
    },
    "CampaignList": {
        "type": "object",
        "required": ["campaigns"],
        "properties": {"campaigns": {"type": "array", "items": _ref("CampaignConfig")}},
    },
    "Report": {
        "type": "object",
        "description": "One randomized report, as the client library sends it.",
        "required": ["report_id", "digest", "time", "payload"],
        "additionalProperties": False,
        "properties": {
            "report_id": {"type": "string", "pattern": _HEX32,
                          "description": "16 random bytes from the client's CSPRNG"},
            "digest": {"type": "string", "pattern": _HEX64,
                       "description": "the digest of the campaign config it was made for"},
            "time": {"type": "integer", "minimum": 0, "maximum": 2**40 - 1,
                     "description": "Unix seconds, truncated to the time precision"},
            "payload": {"description": "the mechanism's randomized output (docs/protocol.md)"},
        },
    },
    "ReportBatch": {
        "type": "object",
        "required": ["reports"],
        "additionalProperties": False,
        "properties": {"reports": {"type": "array", "minItems": 1, "items": _ref("Report")}},
    },
    "ReportStatus": {
        "type": "object",
        "required": ["report_id", "status"],
        "properties": {
            "report_id": {"type": ["string", "null"]},
            "status": {"enum": ["accepted", "duplicate", "rejected"]},
            "error": {"type": "string", "description": "a refused report's problem kind"},
            "detail": {"type": "string"},
        },
    },
    "BatchAnswer": {
        "type": "object",
        "required": ["results", "accepted", "duplicate", "rejected"],
        "properties": {
            "results": {"type": "array", "items": _ref("ReportStatus"),
                        "description": "one per report, in request order"},
            "accepted": {"type": "integer", "minimum": 0},
            "duplicate": {"type": "integer", "minimum": 0},
            "rejected": {"type": "integer", "minimum": 0},
        },
    },
    "CampaignSpec": {
        "type": "object",
        "description": "A campaign definition (docs/campaigns.md); the collector resolves "
                       "and validates it, mechanism by mechanism.",
        "required": ["name", "mechanism", "domain"],
        "properties": {
            "name": {"type": "string", "pattern": _NAME},
            "mechanism": {"type": "string"},
            "epsilon": {"type": "number"},
            "domain": {},
            "params": {"type": "object"},
            "description": {"type": "string"},
            "time_precision": {"type": "integer"},
            "min_batch_size": {"type": "integer"},
            "report_expiry": {"type": "integer"},
            "privacy": {"type": "object"},
            "accept_weak_privacy": {"type": "boolean"},
        },
    },
    "CampaignConfig": {
        "type": "object",
        "description": "A campaign's public config: what clients fetch and verify.",
        "required": ["format", "name", "mechanism", "epsilon", "domain", "params",
                     "time_precision", "digest"],
        "properties": {
            "format": {"const": "chorus.campaign/1"},
            "name": {"type": "string"},
            "description": {"type": "string"},
            "mechanism": {"type": "string"},
            "epsilon": {"type": "number"},
            "domain": {"type": "object"},
            "params": {"type": "object"},
            "time_precision": {"type": "integer"},
            "min_batch_size": {"type": "integer"},
            "report_expiry": {"type": "integer"},
            "privacy": {"type": "object"},
            "digest": {"type": "string", "pattern": _HEX64},
            "derived": {"type": "object"},
            "worst_case": {"type": "object"},
            "warnings": {"type": "array", "items": {"type": "string"}},
            "retired_at": {"type": ["number", "null"]},
            "schedule": {"type": "object",
                         "description": "cadence, start (a UTC date) and periods: each "
                                        "install reports in periods drawn over this horizon"},
            "reporting": {"type": "string",
                          "description": "how many reports one install makes, and when, in "
                                         "words: in the admin list and the retire answer, "
                                         "beside the config (not in it)"},
            "selection": {"type": "object",
                          "description": 'mechanism "auto": what was chosen and why (the '
                                         "candidates' figures, the rule's reason)"},
        },
    },
    "EstimateQuery": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "start": {"type": "integer", "minimum": 0, "maximum": 2**40 - 1},
            "end": {"type": "integer", "minimum": 0, "maximum": 2**40 - 1},
            "candidates": {"type": "array", "items": {"type": "string"},
                           "description": "as the candidate query parameter"},
            "format": {"enum": ["json", "csv"]},
            "postprocessing": {"type": "string"},
            "quantiles": {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0,
                                                     "exclusiveMaximum": 1},
                          "description": "distribution campaigns: the quantiles to read "
                                         "(default 0.5, 0.95, 0.99)"},
            "ranges": {"type": "array", "items": {"type": "array", "items": {"type": "number"},
                                                  "minItems": 2, "maxItems": 2},
                       "description": "distribution campaigns: [a, b] ranges whose shares to "
                                      "estimate"},
            "joints": {"type": "array", "maxItems": 45, "items": {"oneOf": [
                           {"type": "array", "items": {"type": "string"}},
                           {"type": "string"}]},
                       "description": "record campaigns of mechanism 'marginals': the "
                                      "attribute lists whose joints to answer, e.g. "
                                      '[["browser", "os"]] (or "browser,os"); default every '
                                      "pair, up to 10"},
        },
    },
    "Estimate": {
        "type": "object",
        "description": "kind 'frequency' (rows per category, candidate or, for a discovery "
                       "campaign asked without candidates, value its walk found), 'mean', "
                       "'means' (rows per attribute) or 'distribution' (histogram, cdf, "
                       "quantiles, ranges and mean); each estimate has a standard error "
                       "and a 95% confidence interval.",
        "required": ["kind", "campaign", "mechanism", "n"],
        "properties": {
            "kind": {"enum": _ENVELOPED},
            "campaign": {"type": "string"},
            "mechanism": {"type": "string"},
            "epsilon": {"type": "number"},
            "n": {"type": "integer", "minimum": 0},
            "rows": {"type": "array", "items": {"anyOf": [_ref("FrequencyRow"),
                                                          _ref("MeanRow")]},
                     "description": "kind 'frequency': one per category, candidate or "
                                    "discovered value; kind 'means': one per attribute"},
            "window": _ref("Window"),
            "confidence": {"type": "number"},
            "variance_model": {"type": "string"},
            "postprocessing": {"type": "string"},
            **{name: {"type": ["number", "null"], "description": "kind 'mean'"}
               for name in ("std_error", "ci_low", "ci_high")},
            "extra": {"type": "object",
                      "description": "what the estimator adds; a discovery campaign's answer "
                                     "has discovery (what its walk did)",
                      "properties": {"discovery": _ref("Discovery")}},
            "freshness": {"type": "object"},
            "estimand": {"type": "string",
                         "description": "a campaign with a schedule: what the estimate "
                                        "estimates (the installs active in the window's "
                                        "periods, each reporting in one with probability "
                                        "r/T)"},
            "warnings": {"type": "array", "items": {"type": "string"}},
            "edges": {"type": "array", "items": {"type": "number"},
                      "description": "distribution: the buckets' edges (buckets + 1)"},
            "scale": {"enum": ["linear", "log"]},
            "method": {"type": "string"},
            "uncertainty": {"type": "string"},
            "histogram": {"type": "array", "items": {"$ref": "#/components/schemas/Statistic"}},
            "cdf": {"type": "array", "items": {"$ref": "#/components/schemas/Statistic"}},
            "quantiles": {"type": "array", "items": {"$ref": "#/components/schemas/Statistic"}},
            "ranges": {"type": "array", "items": {"$ref": "#/components/schemas/Statistic"}},
            "mean": {"oneOf": [{"type": "number"}, {"$ref": "#/components/schemas/Statistic"}],
                     "description": "a number for kind 'mean'; a statistic for a distribution"},
        },
    },
    "SeriesQuery": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "start": {"type": "integer", "minimum": 0, "maximum": 2**40 - 1},
            "end": {"type": "integer", "minimum": 0, "maximum": 2**40 - 1},
            "step": {"oneOf": [{"type": "integer", "minimum": 1},
                               {"type": "string"}],
                     "description": '"period" (the periods of a campaign\'s schedule, its '
                                    'default), "bucket" (the default otherwise), "day", '
                                    '"week" or seconds (a multiple of the time precision)'},
            "values": {"type": "array", "items": {"type": "string"}},
            "top": {"type": "integer", "minimum": 1},
            "candidates": {"type": "array", "items": {"type": "string"},
                           "description": "as the candidate query parameter"},
            "format": {"enum": ["json", "csv"]},
            "align": {"enum": ["exact", "outer"], "description": _ALIGN},
        },
    },
    "Series": {
        "type": "object",
        "description": "kind 'series': one series per category, candidate, mean, "
                       "attribute or (a record's marginal share) attribute=value, each a "
                       "point per step with n, the unbiased estimate, its "
                       "standard error and 95% interval (null and suppressed: true below "
                       "min_batch_size).",
        "required": ["kind", "campaign", "step", "step_name", "window", "series"],
        "properties": {
            "kind": {"const": "series"},
            "campaign": {"type": "string"},
            "mechanism": {"type": "string"},
            "epsilon": {"type": "number"},
            "estimate_kind": _ESTIMATE_KINDS,
            "step": {"type": "integer"},
            "step_name": {"type": "string"},
            "window": _ref("Window"),
            "confidence": {"type": "number"},
            "variance_model": {"type": "string"},
            "suppression": {"type": "string"},
            "min_batch_size": {"type": "integer"},
            "freshness": {"type": "object"},
            "series": {"type": "array", "items": _ref("ValueSeries")},
            "discovery": _ref("TrackedValues"),
            "schedule": {"type": "object",
                         "description": "a campaign with a schedule: cadence, start, "
                                        "periods and reporting (how one install reports, "
                                        "in words)"},
            "estimand": {"type": "string",
                         "description": "a campaign with a schedule: what each point "
                                        "estimates"},
        },
    },
    "ValueSeries": {
        "type": "object",
        "description": "one value's series: a point per step",
        "required": ["value", "points"],
        "properties": {"value": {"type": "string"},
                       "points": {"type": "array", "items": _ref("SeriesPoint")}},
    },
    "SeriesPoint": {
        "type": "object",
        "description": "one step's estimate of one value: null estimates and suppressed: "
                       "true below min_batch_size",
        "required": ["start", "end", "n", "estimate", "std_error", "ci_low", "ci_high",
                     "suppressed", "reason"],
        "properties": {
            "start": {"type": "integer"},
            "end": {"type": "integer"},
            "n": {"type": "integer", "minimum": 0},
            **{name: {"type": ["number", "null"]}
               for name in ("estimate", "std_error", "ci_low", "ci_high")},
            "suppressed": {"type": "boolean"},
            "reason": {"type": ["string", "null"], "description": "why it is suppressed"},
            "detected": {"type": ["boolean", "null"],
                         "description": "open-string candidates: whether the value passes "
                                        "the estimator's test of f > 0"},
        },
    },
    "Window": {
        "type": "object",
        "description": "a time window in Unix seconds, end excluded; null: unbounded",
        "required": ["start", "end"],
        "properties": {"start": {"type": ["integer", "null"]},
                       "end": {"type": ["integer", "null"]}},
    },
    "CompareQuery": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "baseline_start": {"type": "integer", "minimum": 0, "maximum": 2**40 - 1},
            "baseline_end": {"type": "integer", "minimum": 0, "maximum": 2**40 - 1},
            "start": {"type": "integer", "minimum": 0, "maximum": 2**40 - 1},
            "end": {"type": "integer", "minimum": 0, "maximum": 2**40 - 1},
            "candidates": {"type": "array", "items": {"type": "string"},
                           "description": "as the candidate query parameter"},
            "correction": {"enum": ["benjamini-hochberg", "bonferroni"]},
            "alpha": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "format": {"enum": ["json", "csv"]},
        },
    },
    "Comparison": {
        "type": "object",
        "description": "kind 'comparison': per value (a record's: attribute=value), both "
                       "windows' estimates, the difference with its standard error, 95% "
                       "interval and p-value, adjusted across values by the named correction.",
        "required": ["kind", "campaign", "baseline", "current", "correction", "rows"],
        "properties": {
            "kind": {"const": "comparison"},
            "campaign": {"type": "string"},
            "mechanism": {"type": "string"},
            "epsilon": {"type": "number"},
            "estimate_kind": _ESTIMATE_KINDS,
            "estimand": {"type": "object",
                         "description": "a campaign with a schedule: what each window's "
                                        "estimate estimates (baseline, current)"},
            "baseline": _ref("ComparedWindow"),
            "current": _ref("ComparedWindow"),
            "confidence": {"type": "number"},
            "correction": {"enum": ["benjamini-hochberg", "bonferroni"]},
            "alpha": {"type": "number"},
            "variance_model": {"type": "string"},
            "rows": {"type": "array", "items": _ref("ComparisonRow")},
            "discovery": _ref("TrackedValues"),
        },
    },
    "ComparedWindow": {
        "type": "object",
        "description": "one window of a comparison (Unix seconds, end excluded; null: "
                       "unbounded) and its reports",
        "required": ["start", "end", "n"],
        "properties": {"start": {"type": ["integer", "null"]},
                       "end": {"type": ["integer", "null"]},
                       "n": {"type": "integer", "minimum": 0}},
    },
    "ComparisonRow": {
        "type": "object",
        "description": "one value's change: both windows' estimates, the difference with its "
                       "standard error, 95% interval and p-value (null where a window has no "
                       "estimate)",
        "required": ["value", "baseline_estimate", "baseline_std_error", "current_estimate",
                     "current_std_error", "difference", "std_error", "ci_low", "ci_high",
                     "p_value", "adjusted_p_value", "ci_excludes_zero", "significant", "note"],
        "properties": {
            "value": {"type": "string"},
            **{name: {"type": ["number", "null"]} for name in (
                "baseline_estimate", "baseline_std_error", "current_estimate",
                "current_std_error", "difference", "std_error", "ci_low", "ci_high",
                "p_value", "adjusted_p_value")},
            "ci_excludes_zero": {"type": "boolean"},
            "significant": {"type": "boolean",
                            "description": "the adjusted p-value is below alpha"},
            "note": {"type": ["string", "null"],
                     "description": "why the value was not tested (null: it was), e.g. a "
                                    "Square Wave distribution states no standard error"},
        },
    },
    "AlertRuleSpec": {
        "type": "object",
        "description": "An alert rule (docs/alerts.md): after folds, at most once per time "
                       "bucket, the last `window` against the `window` before; a value that "
                       "turns significant (adjusted p < alpha, |change| >= min_change) is "
                       "posted to the webhook.",
        "required": ["name", "campaign", "window", "webhook"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "pattern": _NAME},
            "campaign": {"type": "string"},
            "window": {"oneOf": [{"type": "integer", "minimum": 1},
                                 {"type": "string", "pattern": "^[1-9][0-9]{0,6}[smhdw]$"}],
                       "description": "seconds, or 30m, 6h, 1d, 2w: whole time buckets"},
            "values": {"type": "array", "items": {"type": "string"},
                       "description": "the values to watch (empty: every value compared)"},
            "correction": {"enum": ["benjamini-hochberg", "bonferroni"]},
            "alpha": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "min_change": {"type": "number", "minimum": 0},
            "resolved": {"type": "boolean",
                         "description": "also notify when a value stops being significant"},
            "webhook": {"type": "string", "description": "an http or https URL; write-only"},
            "secret": {"type": "string", "minLength": 16, "maxLength": 256,
                       "description": "signs each notification (Chorus-Signature); "
                                      "write-only"},
        },
    },
    "AlertRule": {
        "type": "object",
        "required": ["name", "campaign", "window", "values", "correction", "alpha",
                     "min_change", "resolved", "webhook", "signed", "created_at",
                     "evaluated_at", "last_end", "last_error"],
        "properties": {
            "name": {"type": "string"},
            "campaign": {"type": "string"},
            "window": {"type": "integer", "minimum": 1},
            "values": {"type": "array", "items": {"type": "string"}},
            "correction": {"enum": ["benjamini-hochberg", "bonferroni"]},
            "alpha": {"type": "number"},
            "min_change": {"type": "number"},
            "resolved": {"type": "boolean"},
            "webhook": {"type": "string", "description": "the URL's origin only"},
            "signed": {"type": "boolean"},
            "created_at": {"type": "number"},
            "evaluated_at": {"type": ["number", "null"]},
            "last_end": {"type": ["integer", "null"],
                         "description": "the end of the windows last evaluated"},
            "last_error": {"type": ["string", "null"],
                           "description": "why the last evaluation could not compare"},
            "significant": {"type": "array", "items": {"type": "string"},
                            "description": "the values significant now (one rule's answer)"},
        },
    },
    "AlertRuleList": {
        "type": "object",
        "required": ["alerts"],
        "properties": {"alerts": {"type": "array", "items": _ref("AlertRule")}},
    },
    "AlertFiring": {
        "type": "object",
        "description": "one notification and its delivery",
        "required": ["event", "idempotency_key", "created_at", "status", "attempts",
                     "next_attempt_at", "delivered_at", "last_error", "payload"],
        "properties": {
            "event": {"enum": ["triggered", "resolved"]},
            "idempotency_key": {"type": "string"},
            "created_at": {"type": "number"},
            "status": {"enum": ["pending", "delivered", "failed"]},
            "attempts": {"type": "integer", "minimum": 0},
            "next_attempt_at": {"type": ["number", "null"]},
            "delivered_at": {"type": ["number", "null"]},
            "last_error": {"type": ["string", "null"]},
            "payload": {"type": "object", "description": "the JSON body posted"},
        },
    },
    "AlertFiringList": {
        "type": "object",
        "required": ["firings"],
        "properties": {"firings": {"type": "array", "items": _ref("AlertFiring")}},
    },
    # Each estimate kind's own schemas (its rows, statistics, or whole answer).
    **{name: schema for kind in ESTIMATE_KINDS.values()
       for name, schema in kind.schemas.items()},
}

#: The operations' groups, in the order a generated client or a viewer lists them.
_TAGS = [
    {"name": "operations", "description": "health, metrics and this document: for the "
                                          "operators and their tools"},
    {"name": "campaigns", "description": "define, read and retire campaigns (admin; a "
                                         "campaign's config is public, for the clients)"},
    {"name": "reports", "description": "submit randomized reports (the clients, or a "
                                       "shuffler; the ingest key where one is configured)"},
    {"name": "analysis", "description": "estimates, series and comparisons with standard "
                                        "errors and 95% intervals (analyst)"},
    {"name": "annotations", "description": "marks on the time axis, such as a release, drawn "
                                           "on the series they fall in (admin writes, analyst "
                                           "reads)"},
    {"name": "alerts", "description": "rules that call a webhook when a comparison turns "
                                      "significant (admin writes, analyst reads)"},
    {"name": "saved", "description": "the dashboard's saved candidate lists, views and "
                                          "boards (analyst)"},
]

_NAME_PARAMETER = {"name": "name", "in": "path", "required": True,
                   "schema": {"type": "string"}, "example": "browsers",
                   "description": "the campaign's name"}
_ADMIN: list[dict[str, list[str]]] = [{"bearer": []}]
_ALERT_PARAMETER = {"name": "name", "in": "path", "required": True,
                    "schema": {"type": "string"}, "description": "the alert rule's name"}
_CANDIDATE = {"name": "candidate", "in": "query", "explode": True,
              "schema": {"type": "array", "items": {"type": "string"}},
              "description": "open strings, repeatable: the strings to estimate. Required for "
                             "campaigns decoded against a list (rappor, cms, …); optional "
                             "for discovery campaigns (pem, treehist), which without it "
                             "answer for the values their walk finds and with it re-estimate "
                             "the list (the second stage)"}


def _operation(operation_id: str, tag: str, summary: str, answers: dict[str, Any], *,
               security: list[Any] | None = None, body: dict[str, Any] | None = None,
               parameters: list[Any] | None = None,
               problems: tuple[int, ...] = _COMMON) -> dict[str, Any]:
    """One operation. ``operation_id`` names it in generated clients (a function or method
    name): it is part of the API, so it stays when a path or summary changes."""
    operation: dict[str, Any] = {"operationId": operation_id, "tags": [tag],
                                 "summary": summary,
                                 "responses": {**answers, **_problems(*problems)}}
    if security is not None:
        operation["security"] = security
    if body is not None:
        operation["requestBody"] = {"required": True, "content": {JSON: {"schema": body}}}
    if parameters:
        operation["parameters"] = parameters
    return operation


def _reports_operation(operation_id: str, summary: str,
                       parameters: list[Any]) -> dict[str, Any]:
    return _operation(
        operation_id, "reports", summary,
        {"200": _json({"oneOf": [_ref("BatchAnswer"), _ref("ReportStatus")]},
                      "a batch's answer; or one report, stored before (duplicate)"),
         "201": _json(_ref("ReportStatus"), "one report, stored")},
        security=[{}, {"bearer": []}],  # the ingest key, when one is configured
        body={"oneOf": [_ref("Report"), _ref("ReportBatch")]},
        parameters=parameters, problems=(*_COMMON, 409, 410))


def _id(name: str = "id") -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "integer"}}


def _saved_paths() -> dict[str, Any]:
    """The saved lists, views and boards (``http/saved.py``): anyone with the analyst token."""
    analyst: list[dict[str, list[str]]] = [{"bearer": []}]
    removed = {"204": {"description": "removed"}}

    def op(operation_id: str, summary: str, answers: dict[str, Any],
           **options: Any) -> dict[str, Any]:
        return _operation(operation_id, "saved", summary, answers, security=analyst,
                          **options)

    return {
        "/v1/campaigns/{name}/lists": {
            "get": op("listSavedLists", "a campaign's saved candidate lists, by name",
                      {"200": _json(_ref("SavedListList"), "the lists")},
                      parameters=[_NAME_PARAMETER]),
            "post": op("createSavedList", "save a candidate list under a name",
                       {"201": _json(_ref("SavedList"), "the list")},
                       parameters=[_NAME_PARAMETER], body=_ref("NewSavedList"))},
        "/v1/campaigns/{name}/lists/{id}": {"delete": op(
            "deleteSavedList", "remove a saved list", removed,
            parameters=[_NAME_PARAMETER, _id()])},
        "/v1/campaigns/{name}/views": {"get": op(
            "listSavedViews", "a campaign's saved views (saved from its dashboard page)",
            {"200": _json(_ref("SavedViewList"), "the views")}, parameters=[_NAME_PARAMETER])},
        "/v1/campaigns/{name}/views/{id}": {"delete": op(
            "deleteSavedView", "remove a saved view and the board panels that show it",
            removed, parameters=[_NAME_PARAMETER, _id()])},
        "/v1/boards": {
            "get": op("listBoards", "every board, by name",
                      {"200": _json(_ref("BoardList"), "the boards")}),
            "post": op("createBoard", "create a board (or find the one of that name)",
                       {"201": _json(_ref("Board"), "the board")}, body=_ref("NewBoard"))},
        "/v1/boards/{id}": {
            "get": op("getBoard", "a board and its panels",
                      {"200": _json(_ref("Board"), "the board")}, parameters=[_id()]),
            "delete": op("deleteBoard", "remove a board", removed, parameters=[_id()])},
        "/v1/boards/{id}/panels": {"post": op(
            "addBoardPanel", "add a panel: a campaign's section, asked with a saved view or "
            "the page's defaults", {"201": _json(_ref("Board"), "the board")},
            parameters=[_id()], body=_ref("NewPanel"))},
        "/v1/boards/{id}/panels/{panel}": {"delete": op(
            "removeBoardPanel", "remove a panel", removed,
            parameters=[_id(), _id("panel")])},
    }


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document: every route, its tokens, bodies and answers."""
    query_parameters = [
        {"name": "start", "in": "query", "schema": {"type": "integer", "minimum": 0}},
        {"name": "end", "in": "query", "schema": {"type": "integer", "minimum": 0}},
        _CANDIDATE,
        {"name": "format", "in": "query", "schema": {"enum": ["json", "csv"]}},
        {"name": "postprocessing", "in": "query", "schema": {"type": "string"}},
        {"name": "quantiles", "in": "query", "schema": {"type": "string"},
         "description": "distribution campaigns: comma-separated levels, e.g. 0.5,0.95,0.99"},
        {"name": "range", "in": "query", "explode": True,
         "schema": {"type": "array", "items": {"type": "string"}},
         "description": "distribution campaigns: a:b, repeatable"},
        {"name": "joint", "in": "query", "explode": True,
         "schema": {"type": "array", "items": {"type": "string"}},
         "description": "record campaigns of mechanism 'marginals': attribute names a,b "
                        "(or a,b,c up to the campaign's order) whose joint to answer, "
                        "repeatable; default every pair, up to 10"},
    ]
    estimate_answers = {"200": {
        "description": "the estimates of the window (JSON, or CSV with format=csv)",
        "content": {JSON: {"schema": {"oneOf": _ANSWERS}},
                    "text/csv": {"schema": {"type": "string"}}}}}
    estimate_problems = (*_COMMON, 409, 422)
    time_parameter = {"type": "integer", "minimum": 0}
    series_parameters = [
        _NAME_PARAMETER,
        {"name": "start", "in": "query", "schema": time_parameter},
        {"name": "end", "in": "query", "schema": time_parameter},
        {"name": "step", "in": "query", "schema": {"type": "string"},
         "description": '"period" (a scheduled campaign\'s periods, its default), "bucket" '
                        '(the default otherwise), "day", "week" or seconds'},
        {"name": "value", "in": "query", "explode": True,
         "schema": {"type": "array", "items": {"type": "string"}}},
        {"name": "top", "in": "query", "schema": {"type": "integer", "minimum": 1}},
        _CANDIDATE,
        {"name": "format", "in": "query", "schema": {"enum": ["json", "csv"]}},
        {"name": "align", "in": "query", "schema": {"enum": ["exact", "outer"]},
         "description": _ALIGN},
    ]
    compare_parameters = [
        _NAME_PARAMETER,
        *({"name": name, "in": "query", "schema": time_parameter}
          for name in ("baseline_start", "baseline_end", "start", "end")),
        _CANDIDATE,
        {"name": "correction", "in": "query",
         "schema": {"enum": ["benjamini-hochberg", "bonferroni"]}},
        {"name": "alpha", "in": "query",
         "schema": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}},
        {"name": "format", "in": "query", "schema": {"enum": ["json", "csv"]}},
    ]

    def answers(schema: str, what: str) -> dict[str, Any]:
        return {"200": {"description": f"{what} (JSON, or CSV with format=csv)",
                        "content": {JSON: {"schema": _ref(schema)},
                                    "text/csv": {"schema": {"type": "string"}}}}}

    series_answers = answers("Series", "the series")
    compare_answers = answers("Comparison", "the comparison")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Chorus collector",
            "version": VERSION,
            "description": "Collects locally differentially private reports and answers "
                           "estimates with standard errors. Every error is an RFC 9457 "
                           "problem document (application/problem+json).",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        # Relative: OpenAPI 3.1 resolves it against where the document was fetched, so the
        # one document is true behind any host, port or proxy.
        "servers": [{"url": "/", "description": "the collector that serves this document"}],
        "tags": _TAGS,
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {"bearer": {
                "type": "http", "scheme": "bearer",
                "description": "admin or analyst token, metrics token, or the ingest key"}},
        },
        "paths": {
            "/healthz": {"get": _operation(
                "getHealth", "operations", "liveness and a database check",
                {"200": _json(_ref("Health"), "alive")})},
            "/metrics": {"get": _operation(
                "getMetrics", "operations", "Prometheus metrics, summed over the server's workers",
                {"200": {"description": "Prometheus text format",
                         "content": {"text/plain": {"schema": {"type": "string"}}}}},
                security=[{}, {"bearer": []}])},
            "/openapi.json": {"get": _operation(
                "getOpenApi", "operations", "this document",
                {"200": _json({"type": "object"}, "OpenAPI 3.1")})},
            "/v1/campaigns": {
                "get": _operation(
                    "listCampaigns", "campaigns", "list campaigns",
                    {"200": _json(_ref("CampaignList"), "every campaign, retired ones too")},
                    security=_ADMIN),
                "post": _operation(
                    "createCampaign", "campaigns",
                    "create a campaign (idempotent for the same definition)",
                    {"200": _json(_ref("CampaignConfig"), "the same campaign existed"),
                     "201": _json(_ref("CampaignConfig"), "created")},
                    security=_ADMIN, body=_ref("CampaignSpec"),
                    problems=(*_COMMON, 409)),
            },
            "/v1/campaigns/{name}": {"get": _operation(
                "getCampaign", "campaigns",
                "a campaign's public config (clients verify its digest)",
                {"200": _json(_ref("CampaignConfig"), "the config; ETag is its digest")},
                parameters=[_NAME_PARAMETER], problems=(*_COMMON, 410))},
            "/v1/design": {"post": _operation(
                "designCampaign", "campaigns",
                "what each mechanism would give for a planned campaign (the designer), and "
                "optionally one simulated window",
                {"200": _json({"type": "object", "required": ["rows", "recommended"],
                               "description": "as `chorus design --format json`: each "
                                              "mechanism's figures, the recommendation, a "
                                              "plan over time when asked, and `simulation` "
                                              "when asked"}, "the design")},
                security=[{"bearer": []}],
                body={"type": "object", "required": ["kind"],
                      "description": "the designer's request (docs/designing.md): kind, the "
                                     "domain, epsilon, users; optionally frequency, privacy, "
                                     "schedule, installs, distribution, and simulate (a "
                                     "mechanism or \"recommended\")"},
                problems=_COMMON)},
            "/v1/annotations": {
                "get": _operation(
                    "listAnnotations", "annotations",
                    "marks on the time axis: a campaign's and every campaign's, in time order",
                    {"200": _json(_ref("AnnotationList"), "the marks")},
                    security=[{"bearer": []}], parameters=[
                        {"name": "campaign", "in": "query", "schema": {"type": "string"}},
                        {"name": "start", "in": "query",
                         "schema": {"type": "integer", "minimum": 0}},
                        {"name": "end", "in": "query",
                         "schema": {"type": "integer", "minimum": 0}}]),
                "post": _operation(
                    "createAnnotation", "annotations", "mark a time (a release, an incident)",
                    {"201": _json(_ref("Annotation"), "the mark")}, security=_ADMIN,
                    body=_ref("NewAnnotation")),
            },
            "/v1/annotations/{id}": {"delete": _operation(
                "deleteAnnotation", "annotations", "remove a mark",
                {"204": {"description": "removed"}}, security=_ADMIN,
                parameters=[{"name": "id", "in": "path", "required": True,
                             "schema": {"type": "integer"}}])},
            **_saved_paths(),
            "/v1/campaigns/{name}/retire": {"post": _operation(
                "retireCampaign", "campaigns",
                "retire a campaign: no new reports; estimates stay readable",
                {"200": _json(_ref("CampaignConfig"), "retired (or retired before)")},
                security=_ADMIN, parameters=[_NAME_PARAMETER])},
            "/v1/campaigns/{name}/reports": {"post": _reports_operation(
                "submitCampaignReports", "submit one report or a batch for this campaign",
                [_NAME_PARAMETER])},
            "/v1/reports": {"post": _reports_operation(
                "submitReports",
                "submit reports for any campaigns (each report's digest selects it)",
                [{"name": SHUFFLED_BATCH_HEADER, "in": "header", "required": False,
                  "schema": {"type": "string"},
                  "description": "with the shuffler key: one shuffled batch of this size"},
                 {"name": SHUFFLED_SENDERS_HEADER, "in": "header", "required": False,
                  "schema": {"type": "string"},
                  "description": "with the shuffler key and the batch header: the distinct "
                                 "admitted senders the shuffler vouches for in the batch"}])},
            "/v1/campaigns/{name}/estimates": {
                "get": _operation("getEstimates", "analysis", "estimates of a time window",
                                  estimate_answers,
                                  security=[{"bearer": []}],
                                  parameters=[_NAME_PARAMETER, *query_parameters],
                                  problems=estimate_problems),
                "post": _operation("queryEstimates", "analysis",
                                   "estimates of a time window (a long candidate list)",
                                   estimate_answers, security=[{"bearer": []}],
                                   body=_ref("EstimateQuery"), parameters=[_NAME_PARAMETER],
                                   problems=estimate_problems),
            },
            "/v1/campaigns/{name}/series": {
                "get": _operation("getSeries", "analysis",
                                  "estimates per time bucket, day, week or n seconds",
                                  series_answers, security=[{"bearer": []}],
                                  parameters=series_parameters,
                                  problems=estimate_problems),
                "post": _operation("querySeries", "analysis",
                                   "estimates per time bucket, day, week or n seconds (a "
                                   "long candidate list)", series_answers,
                                   security=[{"bearer": []}], body=_ref("SeriesQuery"),
                                   parameters=[_NAME_PARAMETER], problems=estimate_problems),
            },
            "/v1/campaigns/{name}/compare": {
                "get": _operation("getComparison", "analysis",
                                  "each value's change between two windows",
                                  compare_answers, security=[{"bearer": []}],
                                  parameters=compare_parameters,
                                  problems=estimate_problems),
                "post": _operation("queryComparison", "analysis",
                                   "each value's change between two windows (a long "
                                   "candidate list)", compare_answers,
                                   security=[{"bearer": []}], body=_ref("CompareQuery"),
                                   parameters=[_NAME_PARAMETER], problems=estimate_problems),
            },
            **_alert_paths(),
        },
    }


def _alert_paths() -> dict[str, Any]:
    return {
        "/v1/alerts": {
            "get": _operation(
                "listAlerts", "alerts", "list alert rules",
                {"200": _json(_ref("AlertRuleList"), "the rules (of one campaign)")},
                security=_ADMIN,
                parameters=[{"name": "campaign", "in": "query", "schema": {"type": "string"},
                             "description": "only this campaign's rules"}]),
            "post": _operation(
                "createAlert", "alerts", "create an alert rule",
                {"201": _json(_ref("AlertRule"), "created")},
                security=_ADMIN, body=_ref("AlertRuleSpec"), problems=(*_COMMON, 409)),
        },
        "/v1/alerts/{name}": {
            "get": _operation(
                "getAlert", "alerts", "an alert rule and its values significant now",
                {"200": _json(_ref("AlertRule"), "the rule")},
                security=_ADMIN, parameters=[_ALERT_PARAMETER]),
            "delete": _operation(
                "deleteAlert", "alerts", "delete an alert rule and its notifications",
                {"204": {"description": "deleted"}},
                security=_ADMIN, parameters=[_ALERT_PARAMETER]),
        },
        "/v1/alerts/{name}/firings": {"get": _operation(
            "listAlertFirings", "alerts", "an alert rule's recent notifications, newest first",
            {"200": _json(_ref("AlertFiringList"), "the notifications and their delivery")},
            security=_ADMIN,
            parameters=[_ALERT_PARAMETER,
                        {"name": "limit", "in": "query",
                         "schema": {"type": "integer", "minimum": 1, "maximum": 1000}}])},
    }
