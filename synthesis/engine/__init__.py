"""The synthesis engine: named stages over records keyed by stable ids, shards, scheduling, fingerprints, run folders
and provenance records."""
