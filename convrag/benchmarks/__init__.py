"""What is specific to one benchmark beyond its builder and profile: its aggregation rule, report tables and generation
scoring, one folder per benchmark."""
