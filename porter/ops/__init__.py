"""What a user runs besides the loop: setting a run up and closing it, preflight, evaluation (local and Ray),
datasets, replay, the report, PR drafts, the standalone check and sandbox commands, and the progress display.
"""
