"""store_identity: last_run_id, the largest run id ever given (issue 38). SQLite gave a new run the
largest id present + 1, so after `rm` of the newest runs (a study's trials, say) a new run took a
deleted run's id, and whatever still named that id (a study's trial, an export, a note) pointed at
another run. runs.create_runs gives ids above this record on SQLite (AUTOINCREMENT's rule, without
rebuilding the run table, which SQLite's foreign keys refuse inside the schema transaction);
PostgreSQL's sequences never give an id twice. Nullable: a store upgraded here starts from its
largest id present (ids deleted before the upgrade above every remaining run left no record).

Revision 0004, after 0003.
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("store_identity")}
    if "last_run_id" not in columns:  # (a store the head's code made, then unversioned)
        op.add_column("store_identity", sa.Column("last_run_id", sa.BigInteger(), nullable=True))
    # the record starts at the largest id present (db._add_identity does so for a store without the row)
    op.execute("UPDATE store_identity SET last_run_id = (SELECT MAX(id) FROM run) WHERE last_run_id IS NULL")


def downgrade() -> None:
    with op.batch_alter_table("store_identity") as batch:
        batch.drop_column("last_run_id")
