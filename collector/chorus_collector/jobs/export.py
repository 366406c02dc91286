"""A campaign's raw reports as Parquet files, for engines that read files, not the database.

``chorus export NAME --parquet DIR`` writes the reports at or below the watermark, the ones
the campaign's folded statistics count, so a recomputation from the export is comparable
with them bucket by bucket. The layout::

    DIR/part-00000.parquet …   seq int64, time int64 (the bucket), payload string (the
                               canonical JSON stored at ingest), in seq order
    DIR/_chorus-export.json    {"format": 1, "campaign": the public config, "watermark": W,
                               "reports": N, "files": [...]}, written last

Files are chunked by seq, not partitioned by time bucket: chunks stay the same size however
skewed the buckets are, and each row group's min/max statistics on ``time`` let a reader skip
the buckets it does not want anyway. The sidecar's leading underscore makes Spark, Dask and
pyarrow datasets skip it when they read the directory, and a directory without it is an
export that did not finish. Report IDs are not exported: deduplication happened at ingest,
and nothing downstream needs them.

pyarrow comes with the ``dask`` extra and is imported only here, on demand; the estimators
(and scipy) only by a job that maps an export, not by the export itself.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chorus_collector.extras import require
from chorus_collector.storage import Storage

if TYPE_CHECKING:
    from chorus_collector.jobs.aggregate import Buckets

__all__ = ["SIDECAR", "ParquetExport", "export_parquet", "map_row_group", "read_export",
           "row_groups"]

SIDECAR = "_chorus-export.json"
FORMAT = 1
ROWS_PER_FILE = 1_000_000
ROW_GROUP = 100_000  # rows read from the database at once, and one Dask task's work


@dataclass(frozen=True)
class ParquetExport:
    directory: Path
    config: dict[str, Any]  # the campaign's public config
    watermark: int  # the export holds the campaign's reports with seq <= watermark
    reports: int
    files: tuple[str, ...]

    @property
    def name(self) -> str:
        return str(self.config["name"])

    def config_json(self) -> str:
        """The config as ``aggregate.map_chunk`` takes it (its cache key: one form only)."""
        return json.dumps(self.config, sort_keys=True)


def _require_pyarrow() -> None:
    require("pyarrow", "dask", "Parquet export and import")


def export_parquet(storage: Storage, name: str, directory: Path, *,
                   rows_per_file: int = ROWS_PER_FILE,
                   row_group: int = ROW_GROUP) -> ParquetExport:
    """Write campaign ``name``'s reports at or below the watermark to the empty (or new)
    ``directory``: files of ``rows_per_file`` rows (the last one fewer), in row groups of at
    most ``row_group``."""
    _require_pyarrow()
    import pyarrow as pa
    import pyarrow.parquet as pq

    stored = storage.get_campaign(name)
    if stored is None:
        raise KeyError(name)
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"{directory} is not empty")
    directory.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("seq", pa.int64()), ("time", pa.int64()), ("payload", pa.string())])
    watermark = storage.fold_status().watermark
    files: list[str] = []
    writer: Any = None
    in_file = total = 0
    # One streaming read of the campaign (not a query per page), cut into row groups of
    # ``row_group`` rows, ``rows_per_file`` to a file; the columns go to pyarrow as fetched.
    stream = storage.stream_reports(stored.id, watermark, row_group)
    rows_left = chain.from_iterable(stream)
    try:
        while rows := list(islice(rows_left, min(row_group, rows_per_file - in_file))):
            if writer is None:
                files.append(f"part-{len(files):05d}.parquet")
                writer = pq.ParquetWriter(directory / (files[-1] + ".tmp"), schema)
            writer.write_table(pa.table(list(zip(*rows, strict=True)), schema=schema))
            in_file += len(rows)
            total += len(rows)
            if in_file == rows_per_file:
                writer.close()
                writer, in_file = None, 0
    finally:
        stream.close()  # ends the read (and its transaction) now, on any exit
        if writer is not None:
            writer.close()
    for file in files:
        os.replace(directory / (file + ".tmp"), directory / file)
    export = ParquetExport(directory, stored.campaign.public_config(), watermark, total,
                           tuple(files))
    sidecar = {"format": FORMAT, "campaign": export.config, "watermark": watermark,
               "reports": total, "files": files}
    (directory / (SIDECAR + ".tmp")).write_text(json.dumps(sidecar, indent=2) + "\n")
    os.replace(directory / (SIDECAR + ".tmp"), directory / SIDECAR)
    return export


def read_export(directory: Path) -> ParquetExport:
    """The export in ``directory``, from its sidecar (ValueError if it is not one)."""
    try:
        sidecar = json.loads((directory / SIDECAR).read_text())
    except FileNotFoundError:
        raise ValueError(f"{directory} has no {SIDECAR}: not a finished Chorus export") \
            from None
    if sidecar.get("format") != FORMAT:
        raise ValueError(f"{directory}: export format {sidecar.get('format')!r}, this "
                         f"version of Chorus reads {FORMAT}")
    missing = [f for f in sidecar["files"] if not (directory / f).is_file()]
    if missing:
        raise ValueError(f"{directory}: files of the export are missing: {missing}")
    return ParquetExport(directory, sidecar["campaign"], int(sidecar["watermark"]),
                         int(sidecar["reports"]), tuple(sidecar["files"]))


def row_groups(export: ParquetExport) -> list[tuple[str, int]]:
    """(file path, row group index) of every row group: the export's units of work."""
    _require_pyarrow()
    import pyarrow.parquet as pq

    return [(str(export.directory / file), index) for file in export.files
            for index in range(pq.ParquetFile(export.directory / file).num_row_groups)]


def map_row_group(path: str, index: int, config_json: str) -> Buckets:
    """The map step over one row group: (reports, statistic) per time bucket."""
    _require_pyarrow()
    import pyarrow.parquet as pq

    from chorus_collector.jobs.aggregate import map_chunk

    table = pq.ParquetFile(path).read_row_group(index, columns=["time", "payload"])
    groups: dict[int, list[str]] = defaultdict(list)
    for time, payload in zip(table.column("time").to_pylist(),
                             table.column("payload").to_pylist(), strict=True):
        groups[time].append(payload)
    return {time: (len(payloads), map_chunk(config_json, payloads))
            for time, payloads in groups.items()}
