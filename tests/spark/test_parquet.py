"""spark_jobs/parquet.py writes files Spark reads back as the rows and the schema Spark itself writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def _schema() -> Any:
    from pyspark.sql.types import (
        ArrayType,
        BooleanType,
        DoubleType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    return StructType(
        [
            StructField("name", StringType(), True),
            StructField("count", LongType(), False),
            StructField("keys", ArrayType(StringType(), True), True),
            StructField("ratio", DoubleType(), True),
            StructField("bucket", IntegerType(), False),
            StructField("flag", BooleanType(), True),
            StructField("reasons", ArrayType(StringType(), False), False),
        ]
    )


ROWS: list[tuple[Any, ...]] = [
    ("plain", 1, ["a", "b"], 0.1, 3, True, ["expired"]),
    ('quo"te\nnew line ü ✓ 𝄞', 2**62, [], None, -7, None, []),
    (None, -(2**63), None, 1e-300, 0, False, ["a", "b", "c"]),
    ("", 0, ["x", None, ""], -0.0, 2**31 - 1, True, [""]),
    *[(f"n{i}", i, [str(i)] * (i % 3), i / 7, i, i % 2 == 0, ["r"] * (i % 4)) for i in range(3000)],
]


def test_same_rows_and_schema_as_a_file_spark_wrote(spark: Any, tmp_path: Path) -> None:
    from ottermq.spark_jobs.parquet import supports, write_table

    schema = _schema()
    assert supports(schema)
    write_table(tmp_path / "ours.parquet", ROWS, schema)
    spark.createDataFrame(ROWS, schema).coalesce(1).write.parquet(str(tmp_path / "spark.parquet"))
    ours = spark.read.parquet(str(tmp_path / "ours.parquet"))
    theirs = spark.read.parquet(str(tmp_path / "spark.parquet"))
    assert ours.schema == theirs.schema
    assert [tuple(r) for r in ours.collect()] == [tuple(r) for r in theirs.collect()] == ROWS
    assert sorted(p.name for p in (tmp_path / "ours.parquet").iterdir())[0] == "_SUCCESS"


def test_empty_table_and_replacing_an_output(spark: Any, tmp_path: Path) -> None:
    from ottermq.spark_jobs.parquet import write_table

    schema = _schema()
    target = tmp_path / "t.parquet"
    write_table(target, ROWS[:2], schema)
    write_table(target, [], schema)  # replaces the directory
    read = spark.read.parquet(str(target))
    assert read.collect() == [] and read.schema.fieldNames() == schema.fieldNames()
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]  # no staging directory left


def test_refuses_what_it_cannot_write(pyspark_installed: None, tmp_path: Path) -> None:
    from ottermq.spark_jobs.parquet import encode_table, supports
    from pyspark.sql.types import DateType, LongType, StructField, StructType

    assert not supports(StructType([StructField("d", DateType())]))
    with pytest.raises(ValueError, match="non-nullable"):
        encode_table([(None,)], StructType([StructField("n", LongType(), False)]))
