"""ottermq.spark_jobs: PySpark analytics over the broker's dead-letter archive (schema v1).

Modules: ``schema`` (the record schema), ``io`` (reading, with bad-line accounting), ``report``
(the report job: tables, summary, report.md, charts; the tables are defined in ``report_tables``,
computed together by ``fused`` and ``fused_ids``, written by ``table_files``), ``compact`` (JSON
Lines to Parquet), ``replay`` (select and republish), ``generate`` (synthetic archives; its queues
in ``generate_queues``, its shapes in ``generate_loops`` and ``generate_uniform``), ``cli`` (entry
points for ``ottermq dlq``).

Nothing here imports the broker: the archive schema is the contract. pyspark (and matplotlib
for charts) come with the ``spark`` extra; importing this package itself needs neither.
"""
