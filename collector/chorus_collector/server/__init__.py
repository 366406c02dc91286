"""Running the collector: the production server (``gunicorn``: ``chorus serve``), the JSON
log format (``logs``) and a collector as a child process on loopback (``process``)."""
