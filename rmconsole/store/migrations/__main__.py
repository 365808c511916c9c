"""`python -m rmconsole.store.migrations new "what changes" [--autogenerate]`: a new revision file
in versions/, numbered after the head. --autogenerate writes the operations that bring a store at
the head to tables.py's tables (compared on a throwaway SQLite store; read and trim them: a
PostgreSQL-only or data change is written by hand). `heads`: the head revision."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from . import config, head, revisions


def _new(message: str, autogenerate: bool) -> None:
    from alembic import command
    from sqlalchemy import create_engine

    number = f"{int(head()) + 1:04d}"
    with tempfile.TemporaryDirectory() as folder:
        engine = create_engine(f"sqlite:///{Path(folder) / 'head.db'}")
        with engine.begin() as conn:
            from . import upgrade

            upgrade(conn)  # a store at the head, which autogenerate compares with tables.py
            command.revision(config(conn), message=message, autogenerate=autogenerate, rev_id=number)
        engine.dispose()
    revisions.cache_clear()
    print(f"versions/{number}_*.py: revision {number} (after {int(number) - 1:04d})")


def main(argv: list[str]) -> int:
    if argv[:1] == ["heads"]:
        print(head())
        return 0
    if len(argv) >= 2 and argv[0] == "new" and set(argv[2:]) <= {"--autogenerate"}:
        _new(argv[1], "--autogenerate" in argv[2:])
        return 0
    print('usage: python -m rmconsole.store.migrations new "what changes" [--autogenerate] | heads', file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
