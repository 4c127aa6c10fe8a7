"""The command line and the glue of commands that are not the loop (preflight, check, sandbox, data).

May import every other package of porter; nothing in porter imports it."""
