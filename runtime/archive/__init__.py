"""The archive's format: every topic as Parquet files per run and partition (layout), on a
folder or object store (store). Written by the archiver service, read by replay and resume."""
