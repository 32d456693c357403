"""MTRAG: the official retrieval scoring (IBM's scripts) and the retrieval run format of a submission."""
