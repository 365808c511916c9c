"""`python -m rmconsole` is the `rmconsole` command."""

from .cli import main

main()
