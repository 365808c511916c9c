"""`python -m rmconsole` is the `rmconsole` command."""

from . import main

main()
