"""The fault campaign's tables in docs/troubleshooting.md, read by the tests that check them.

Two tables, one source: "Bad input" (`test_bad_input.py` runs every row: case · command · exit ·
prints · verdict) and "Faults" (case · what is done · exit · message · verdict · test): each
fault row is claimed by the test named in its last column (`claim("case")` at import), which
checks its exit code and message against the row (`Claim.check`); `test_troubleshooting_tables.py` checks that
every row is claimed exactly once, by the test the row names, and counts the campaign.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from conftest import REPO

PAGE = REPO / "docs" / "troubleshooting.md"
VERDICTS = ("clean",)  # or "explained: WHY"


def code(cell: str) -> str:
    """The text of a Markdown code span (`x` or `` x `` when x holds a backtick), else the cell."""
    cell = cell.strip()
    if cell.startswith("`` ") and cell.endswith(" ``"):
        return cell[3:-3]
    if cell.startswith("`") and cell.endswith("`"):
        return cell[1:-1]
    return cell


def table(section: str, page: Path = PAGE) -> list[dict[str, str]]:
    """The rows of the first table under `## section`, as dicts by the header's names."""
    text = page.read_text(encoding="utf-8").split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    head = [h.strip() for h in lines[0].strip().strip("|").split(" | ")]
    rows = []
    for line in lines[2:] if lines[1].startswith("|---") else lines[1:]:
        cells = [
            c.replace("\\|", "|") for c in re.split(r"(?<!\\) \| ", line.strip().removeprefix("| ").removesuffix(" |"))
        ]
        assert len(cells) == len(head), f"{section}: a row with {len(cells)} cells, not {len(head)}: {line}"
        rows.append(dict(zip(head, (c.strip() for c in cells))))
    return rows


def says(text: str, expected: str) -> bool:
    """Whether `text` holds the expected line, each "…" matching any text."""
    return re.search(".*".join(re.escape(part.strip()) for part in expected.split("…")), text, re.DOTALL) is not None


def verdict_ok(verdict: str) -> bool:
    return verdict in VERDICTS or verdict.startswith("explained: ")


# ---------------------------------------------------------------------- the faults table


FAULTS = {row["case"]: row for row in table("Faults")}
CLAIMED: dict[str, str] = {}  # case -> "module::test"


@dataclass(frozen=True)
class Claim:
    case: str
    row: dict[str, str]

    def check(self, exit_code: int | None, message: str) -> None:
        """What the test observed agrees with the page's row: its exit code ("—": no single process
        exits) and its message pattern."""
        expected_exit = self.row["exit"]
        if expected_exit not in ("—", "-"):
            assert exit_code == int(expected_exit), (self.case, exit_code, expected_exit)
        expected = code(self.row["message"])
        if expected not in ("—", "-"):
            assert says(message, expected), (self.case, message, expected)
        assert "Traceback" not in message


def claim(case: str, test: str) -> Claim:
    """Register `test` (module::function) as the one that checks the fault row `case`."""
    assert case in FAULTS, f"no row {case!r} in the Faults table of {PAGE}"
    assert case not in CLAIMED or CLAIMED[case] == test, f"{case!r} claimed by {CLAIMED[case]} and {test}"
    CLAIMED[case] = test
    return Claim(case, FAULTS[case])


def garble_run_table(path: Path) -> None:
    """Overwrite the root page of a real SQLite store's `run` table with garbage (its header and
    schema stay readable, so `PRAGMA integrity_check` can say what is broken)."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = 'run'").fetchone()
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    finally:
        conn.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(bytes((i * 37 + 11) % 256 for i in range(page_size)))
