"""Dataset card templates used by the exporter."""
