"""Corpus curation as datatrove pipeline steps: chunking, boilerplate and quality filters, MinHash deduplication."""
