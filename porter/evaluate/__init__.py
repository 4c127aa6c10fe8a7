"""Runs as a whole: the runs folder and `porter run`'s glue, replay, eval over a corpus (local and Ray).

May import every package but commands."""
