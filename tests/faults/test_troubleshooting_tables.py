"""The fault campaign's page and its tests agree: every Faults row names a test that exists and
claims that row (and so checks its exit code and message), every claim in the tests names a
row, every verdict is clean or explained, and the campaign has at least 120 cases."""

from __future__ import annotations

import importlib.util
import inspect
import re
from types import ModuleType

from conftest import REPO
from support.campaign import FAULTS, code, table, verdict_ok

TESTS = REPO / "tests"  # the test files, in whatever subfolder each lives


def _test_module(file_name: str) -> ModuleType:
    """The test module of that file name, wherever it lives under tests/ (the page names files
    by their name only)."""
    found = sorted(TESTS.rglob(file_name))
    assert len(found) == 1, f"{file_name}: {len(found)} files of that name under tests/"
    spec = importlib.util.spec_from_file_location(f"_campaign_{found[0].stem}", found[0])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_fault_row_is_claimed_by_the_test_it_names() -> None:
    modules = {}
    for case, row in FAULTS.items():
        file_name, _, function = code(row["test"]).partition("::")
        module = modules.get(file_name) or modules.setdefault(file_name, _test_module(file_name))
        test = getattr(module, function, None)
        assert test is not None, f"{case!r}: no test {code(row['test'])}"
        assert f'"{case}"' in inspect.getsource(test), f"{code(row['test'])} does not claim {case!r}"
        assert verdict_ok(row["verdict"]), (case, row["verdict"])
        assert row["exit"] in ("—", "-") or row["exit"].isdigit(), (case, row["exit"])


def test_every_claim_in_the_tests_names_a_row() -> None:
    claimed = set()
    for path in TESTS.rglob("test_*.py"):
        for case in re.findall(r'claim\(\s*"([^"]+)"', path.read_text()):
            assert case in FAULTS, f"{path.name} claims {case!r}, which is not a row of the Faults table"
            claimed.add(case)
    assert claimed == set(FAULTS), set(FAULTS) - claimed


def test_the_campaign_has_at_least_120_cases() -> None:
    bad_input = table("Bad input")
    assert all(verdict_ok(row["verdict"]) for row in bad_input)
    total = len(bad_input) + len(FAULTS)
    print(f"\ncampaign: {len(bad_input)} bad-input cases + {len(FAULTS)} faults = {total}")
    assert total >= 120
