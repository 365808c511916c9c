"""The store's revisions, one file each (Alembic reads them by path; a package so that a wheel carries them)."""
