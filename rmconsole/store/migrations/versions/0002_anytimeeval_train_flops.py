"""anytimeeval: train_flops (issue 40: the training FLOPs spent by each anytime evaluation, read
by `report --budget`). Nullable: points stored before it read as "not recorded".

Revision 0002, after 0001.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("anytimeeval")}
    if "train_flops" not in columns:  # (a development store of the branch got it unversioned)
        op.add_column("anytimeeval", sa.Column("train_flops", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("anytimeeval") as batch:
        batch.drop_column("train_flops")
