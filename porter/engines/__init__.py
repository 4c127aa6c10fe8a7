"""Serving engines: launching the serve command and waiting for health, the rules between parallel-size flags,
how far a start-up got, and the probe of an engine's own argument parser.
"""
