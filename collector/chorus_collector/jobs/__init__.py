"""Jobs over stored reports: the resumable fold into per-bucket statistics (``folding``), the
batch recomputation on every core (``aggregate``) or on a Dask cluster (``distributed``), and
Parquet export (``export``). All of them share the estimators' map / merge core."""
