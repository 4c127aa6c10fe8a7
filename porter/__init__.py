"""porter: port a newly released LLM to AMD ROCm serving on day 0."""

__version__ = "0.1.0"
