"""The agent loop: the loop itself, the conversation under its budget, the prompt, the tools and their results.

Imports the ledger (what a run keeps), the engines, the checks, the models and the sandbox; nothing below
imports this package. Setting a run up is porter.evaluate; writing its outputs, porter.report.
"""
