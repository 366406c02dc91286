"""WSGI entry point for any WSGI server: ``gunicorn chorus_collector.wsgi:app``."""

from chorus_collector.app import create_app

app = create_app()
