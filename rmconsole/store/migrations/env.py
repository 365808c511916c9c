"""Alembic's entry point for this package: the work is in rmconsole.store.migrations.run_env."""

from alembic import context

from rmconsole.store.migrations import run_env

run_env(context)
