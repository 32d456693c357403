"""MTR-Pipeline (MTR-Suite): curate, cluster, converse, polish, assemble; output in the MTR-Bench builder's source
schema."""
