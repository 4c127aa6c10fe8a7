"""`python -m porter`: the same command line as the `porter` script."""

from porter.commands.cli import main

main()
