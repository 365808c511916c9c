"""systemsample: a run's system load (issue 42), sampled every few seconds by its supervisor:
the worker's process tree's CPU % and resident memory, the machine's load average, the GPUs'
utilisation and the tree's GPU memory (None where not measured). A new table: older stores
simply have no samples for their runs.

Revision 0003, after 0002.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("systemsample"):  # (a store the head's code made, then unversioned)
        return
    op.create_table(
        "systemsample",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cpu_percent", sa.Float(), nullable=True),
        sa.Column("rss_bytes", sa.BigInteger(), nullable=True),
        sa.Column("load1", sa.Float(), nullable=True),
        sa.Column("gpu_util", sa.Float(), nullable=True),
        sa.Column("gpu_mem_bytes", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_systemsample_run_at", "systemsample", ["run_id", "at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_systemsample_run_at", table_name="systemsample")
    op.drop_table("systemsample")
