"""`python -m paraplan` (installed) and `python -m optimizer` (from a checkout): the CLI."""

from paraplan.cli import main

main()
