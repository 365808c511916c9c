from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command() -> None:
    """The Quick start's second command is exactly what CI runs."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.strip().splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[1] in (REPO / ".ci" / "run").read_text()
    assert "rmconsole run" in commands[0]
