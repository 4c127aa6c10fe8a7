"""A checkpoint -> its facts -> layouts for the node -> a task draft (`porter init`).

May import task, engines, checks and the leaves (errors, schema, terminal, upstream_facts); never loop, ledger,
report, evaluate or commands.
"""
