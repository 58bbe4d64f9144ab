"""ottermq.spark_jobs: PySpark analytics over the broker's dead-letter archive (schema v1).

Modules: ``schema`` (the record schema), ``io`` (reading, with bad-line accounting), ``report``
(tables, summary, report.md, charts), ``compact`` (JSON Lines to Parquet), ``replay`` (select and
republish), ``generate`` (synthetic archives), ``cli`` (entry points for ``ottermq dlq``).

Nothing here imports the broker: the archive schema is the contract. pyspark (and matplotlib
for charts) come with the ``spark`` extra; importing this package itself needs neither.
"""
