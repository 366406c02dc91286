"""The optional shuffler: a separate service between clients and the collector that batches,
shuffles and forwards reports (``app``: its HTTP routes; ``pool``: the durable pool;
``forward``: forwarding batches; ``settings``; ``server``: ``chorus shuffler``).
See docs/shuffler.md."""
