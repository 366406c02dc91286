# The Chorus collector: gunicorn serving the Flask app, SQLite on a volume at /data (or a
# PostgreSQL database named by CHORUS_DATABASE=postgresql://...). The dask extra makes the
# same image a Dask scheduler or worker too (docker compose --profile dask).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    CHORUS_BIND=0.0.0.0:8000 \
    CHORUS_DATABASE=/data/chorus.db

WORKDIR /app
COPY pyproject.toml README.md ./
COPY client ./client
COPY collector ./collector
COPY shared ./shared
RUN pip install --no-cache-dir ".[collector,postgresql,dask]" \
    && useradd --system --uid 10001 --home-dir /data chorus \
    && mkdir -p /data && chown chorus /data

USER chorus
VOLUME ["/data"]
EXPOSE 8000
STOPSIGNAL SIGTERM
CMD ["chorus", "serve"]
