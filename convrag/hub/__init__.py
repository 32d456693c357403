"""The Hugging Face Hub and interchange formats: resolving and pushing repos, the exporter (Parquet + README configs),
BEIR / TREC files, the mteb layout and metric Spaces."""
