"""ottermq.spark_jobs."""
