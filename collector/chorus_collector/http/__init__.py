"""The HTTP layer: the Flask app, its routes, query arguments, OpenAPI, auth, rate limits and
metrics. It turns requests into calls on the packages below (ingest, analysis, design,
storage) and their results and :class:`~chorus_collector.problems.Problem` refusals into
responses; nothing below imports it."""
