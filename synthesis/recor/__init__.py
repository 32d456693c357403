"""RECOR's Decomposition-and-Verification pipeline: load, align, aspects, facts, turns, release; output in the RECOR
builder's source schema."""
