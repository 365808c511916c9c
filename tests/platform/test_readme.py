"""The README is the front page: short, its quick start is what CI runs, its screenshot is the
app as the snapshot tests see it, and every link from it and from docs/ leads somewhere."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
RUN_SCREEN_SNAPSHOT = REPO / "tests/faces/__snapshots__/test_tui_screens/test_run_screen_of_a_running_rm_run.svg"


def test_ci_runs_the_readme_test_command() -> None:
    """The Quick start's second command is exactly what CI runs."""
    readme = README.read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.strip().splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[1] in (REPO / ".ci" / "run").read_text()
    assert "rmconsole run" in commands[0]


def test_readme_is_one_short_page() -> None:
    assert len(README.read_bytes()) <= 12 * 1024


def test_the_screenshot_is_the_run_page_snapshot() -> None:
    """docs/screenshot.svg is the run-page SVG the snapshot test checks; after
    `pytest tests/faces/test_tui_screens.py --snapshot-update`, copy that file over it."""
    assert "](docs/screenshot.svg)" in README.read_text()
    assert (REPO / "docs" / "screenshot.svg").read_bytes() == RUN_SCREEN_SNAPSHOT.read_bytes()


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_relative_link_leads_to_a_file_and_heading() -> None:
    broken = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            path, _, anchor = target.partition("#")
            where = (page.parent / path).resolve() if path else page
            if not where.exists() or (anchor and where.suffix == ".md" and anchor not in anchors(where)):
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken
    assert len(PAGES) >= 8
