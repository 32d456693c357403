"""The ``leaderboard`` command: results of many systems on one benchmark gathered into a collection, and the board
built from it.

* :mod:`convrag.leaderboard.entry`: a ``convrag evaluate`` results folder read as a candidate entry (its
  benchmark identity, per-query scores, run files, model records, caveats) and re-scored from its run files.
  :mod:`convrag.leaderboard.mtrag` reads and re-scores MTRAG / MTRAG-UN results (``mtrag-official``).
* :mod:`convrag.leaderboard.collection`: the collection's layout (a local folder or a Hub dataset repo) and adding
  an entry to it.
* :mod:`convrag.leaderboard.board`: the board's tables (main table with CIs, paired tests, turn positions) and
  :mod:`convrag.leaderboard.render` its static files; :mod:`convrag.leaderboard.space_app` is the ``app.py`` of the
  board's Gradio Space (copied into the board folder, never imported by convrag).
"""
