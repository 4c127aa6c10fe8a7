"""What a run keeps, typed: samples, served configurations, attempts and decisions; the state file, the
transcript, the measurement cache, the noise bar, and the pure keep-or-revert decision.

Runs nothing and talks to no sandbox or model: the loop (porter.loop) measures and applies what is decided here.
"""
