"""The core every other part may use: record schema, errors, files (JSONL, Parquet, output folders, corpora), options,
progress, provenance and statistics."""
