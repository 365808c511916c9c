"""The baseline: the store as main left it at a168f0c (migrations/baseline.py, frozen).

In an empty database it creates every table. In a store written before versioning whose columns
are not all there (an older rmconsole; one that has them all is stamped here instead, by
migrations.shape_of_unversioned) it adds what is missing, as the unversioned rmconsole did when
it opened an older store: missing tables are created, missing columns added (each nullable, so
old rows read as "not recorded"), missing indexes made, and the accuracy columns once NOT NULL made nullable
(SQLite rebuilds the table for that, in batch mode). Nothing is renamed or dropped.
"""

import sqlalchemy as sa
from alembic import op

from rmconsole.store.migrations.baseline import METADATA, RELAXED

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    conn = op.get_bind()
    inspector = sa.inspect(conn)
    present = set(inspector.get_table_names())
    for table in METADATA.sorted_tables:
        if table.name not in present:
            table.create(conn)
            continue
        columns = {c["name"]: c for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name not in columns:
                op.add_column(table.name, column._copy())
        strict = [
            name for t, name in RELAXED if t == table.name and not columns.get(name, {"nullable": True})["nullable"]
        ]
        if strict:
            with op.batch_alter_table(table.name, copy_from=table, recreate="auto") as batch:
                for name in strict:
                    batch.alter_column(name, existing_type=sa.Float(), nullable=True)
        indexes = {index["name"] for index in sa.inspect(conn).get_indexes(table.name)}
        for index in table.indexes:  # (a rebuilt table, or one from before an index was declared)
            if index.name not in indexes:
                index.create(conn)


def downgrade() -> None:
    for table in reversed(METADATA.sorted_tables):
        op.drop_table(table.name)
