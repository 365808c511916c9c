#!/usr/bin/env bash
# The static checks (issue 29): ruff's linter and formatter over the repository, mypy over the
# package; their settings live in pyproject.toml ([tool.ruff], [tool.mypy]). Runs all three, says
# which failed, exits non-zero if any did; each check's wall time is printed. Uses the ruff and
# mypy on PATH, or those beside $PYTHON when set (.ci/run passes its fresh venv's python).
# Fix what it finds: `ruff check --fix .` (safe fixes), `ruff format .`, then mypy by hand.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${PYTHON:+$(dirname "$PYTHON")/}
failed=()
run() {
    local name=$1; shift
    local t0=$SECONDS
    if "$@"; then
        echo "static: $name clean ($((SECONDS - t0)) s)"
    else
        echo "static: $name FAILED ($((SECONDS - t0)) s): $*" >&2
        failed+=("$name")
    fi
}
run "ruff check" "${bin}ruff" check .
run "ruff format" "${bin}ruff" format --check .
run "mypy" "${bin}mypy"
if ((${#failed[@]})); then
    echo "static: failed: ${failed[*]}" >&2
    exit 1
fi
