"""One grammar read by every command: run ids (`3,4`, `3-9`, `last`) in `tag`, `archive`, `rm`,
`export RUN...`, `report --runs` and a `runs` term; `--status` comma lists; closed-set filter
values refused with the allowed ones; comma-list options that name a key once; what `tune
--show`, `tune --help` and `diff` say. In-process (support.cli); the runs are written through the
store's API (support.identity_store), nothing trains."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support import identity_store
from support.cli import in_process

from rmconsole.store.filters import run_id_spans

pytestmark = pytest.mark.usefixtures("isolated_home")

EMPTY_PART = "an empty run id between commas; expected run ids like 3,4,7, 3-9 or last"


def _ids(listing: str) -> list[int]:
    return [r["id"] for r in json.loads(listing)]


def test_run_ids_read_alike_by_every_command() -> None:
    ids = identity_store.build()
    assert run_id_spans("1,3-5,last", "--runs") == [(1, 1), (3, 5), None]
    # `runs 1-3` is runs 1 to 3 (it was a word that matched no run)
    assert _ids(in_process("runs", "1-3", "--json").stdout) == [1, 2, 3]
    assert _ids(in_process("runs", "2,4-5", "--json").stdout) == [2, 4, 5]
    assert _ids(in_process("runs", "12", "--json").stdout) == []  # a lone number stays a word (run 12, seed=12)
    # a sweep id's words are not a range (20260115 > 90000)
    assert _ids(in_process("runs", "20260115-090000", "--json").stdout) == [ids["sweep1"], ids["sweep2"]]
    # `1,,2` is refused by every reader in the same words (tag/archive/rm took it, --runs refused it)
    for argv, said in (
        (("tag", "1,,2", "+x"), "RUN '1,,2'"),
        (("archive", "1,,2"), "RUN '1,,2'"),
        (("rm", "--yes", "1,"), "RUN '1,'"),
        (("export", "1,,2", "--to", "tensorboard", "--dir", "out"), "RUN '1,,2'"),
        (("report", "1,,2"), "'1,,2'"),  # report's words are filter terms, as runs'
        (("report", "--runs", "1,,2"), "--runs '1,,2'"),
        (("runs", "1,,2"), "'1,,2'"),
    ):
        done = in_process(*argv)
        assert done.returncode == 2, (argv, done.stdout)
        assert done.stderr.strip().splitlines() == [f"error: {said}: {EMPTY_PART}"], argv
    reversed_ = "9-3 is empty (the first id is larger than the last; write 3-9)"
    for argv in (("tag", "9-3", "+x"), ("report", "--runs", "9-3"), ("runs", "9-3")):
        assert in_process(*argv).stderr.strip().endswith(reversed_), argv
    assert "#x" not in in_process("runs", "--all").stdout  # nothing was tagged on the way


def test_status_is_a_comma_list_everywhere_and_closed_values_are_named() -> None:
    ids = identity_store.build()
    both = in_process("runs", "--status", "running,queued", "--json")
    assert both.returncode == 0, both.stderr
    assert sorted(_ids(both.stdout)) == sorted([ids["partial"], ids["sweep1"], ids["sweep2"]])
    allowed = "allowed: queued, running, finished, failed, stopped"
    for argv in (("runs", "--status", "running,nope"), ("report", "--status", "nope")):
        done = in_process(*argv)
        assert (done.returncode, done.stderr.strip()) == (2, f"error: --status 'nope': {allowed}"), argv
    # a filter term's value of a closed set: refused with the set, not "no runs match"
    done = in_process("runs", "status:nope")
    assert (done.returncode, done.stderr.strip()) == (2, f"error: 'status:nope': unknown status 'nope'; {allowed}")
    stream = in_process("report", "stream:Nope")
    assert stream.stderr.strip() == (
        "error: 'stream:Nope': unknown stream 'Nope'; allowed: online, offline, iblurry, siblurry"
    )
    assert in_process("runs", "archived:maybe").stderr.strip().endswith("allowed: true, false")
    assert _ids(in_process("runs", "stream:ONLINE", "--json").stdout)  # case does not matter
    # an open-ended key (methods come from plug-ins too) may match nothing
    open_ended = in_process("runs", "method:nope")
    assert (open_ended.returncode, open_ended.stderr.startswith("no runs match method:nope")) == (1, True)


def test_a_key_listed_twice_is_one_column() -> None:
    identity_store.build()
    done = in_process("report", "--runs", "1-2", "--metrics", "A_last,A_last", "--rows", "method,method", "-f", "csv")
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0].split(",")
    assert header.count("A_last mean") == 1 and header.count("method") == 1, header
    table = in_process("report", "--runs", "1-2", "--metrics", "A_last,A_last").stdout
    assert table.count("A_last") == 1, table


def test_tune_show_of_a_study_not_started_says_so(tmp_path: Path) -> None:
    study = tmp_path / "study.toml"
    study.write_text('name = "lr"\nmetric = "val_A_last"\n[set]\nval_fraction = 0.1\n[params]\nlr = "log:0.01..0.1"\n')
    done = in_process("tune", "-f", str(study), "--show")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: --show: study lr has not started yet, so it has no trials to show; "
        "run the same command without --show to start it"
    )
    assert "--param" not in done.stderr  # the file has them: not "start it with --param ... --metric ..."


def test_help_paragraphs_wrap_where_the_terminal_ends() -> None:
    """`tune --help` at 80 columns had "`--study NAME`" alone on a line (the docstring's break)."""
    shown = in_process("tune", "--help", columns=80).stdout
    lines = [line.strip() for line in shown.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("TPE, random or grid"))
    paragraph = lines[start : lines.index("", start)]
    assert len(paragraph) > 1 and all(len(line) > 60 for line in paragraph[:-1]), paragraph  # filled to the width
    assert "`--study NAME` alone continues a study" in " ".join(paragraph)


def test_diff_shows_the_sweep_as_identity_not_as_a_config_key() -> None:
    ids = identity_store.build()
    result = json.loads(in_process("diff", str(ids["base"]), str(ids["sweep1"]), "--json").stdout)
    assert ("sweep", "—", "20260115-090000-abcd") in [tuple(row) for row in result["identity"]]
    keys = [row[0] for row in (*result["identity"], *result["config"])]
    assert "sweep_id" not in keys, keys
    assert not re.search(r"^\s*sweep_id\b", in_process("diff", "1", "7").stdout, re.M)


def test_a_toml_date_is_echoed_as_written(tmp_path: Path) -> None:
    preset = tmp_path / "dated.toml"
    base = Path(__file__).parents[2] / "presets" / "mnist-blurry10-online-finetune.toml"
    text = re.sub(r"(?m)^epochs\s*=.*$", "", base.read_text())
    preset.write_text(text + "\nepochs = 1979-05-27\n")
    done = in_process("run", "-p", str(preset), "--detach")
    assert done.returncode == 2
    assert done.stderr.strip() == "error: epochs=1979-05-27: Input should be a valid integer"
    study = tmp_path / "study.toml"
    study.write_text('name = "t"\nmetric = "val_A_last"\n[set]\nlr = 07:32:00\n[params]\nbatch_size = "int:8..16"\n')
    said = in_process("tune", "-f", str(study), "--show").stderr
    assert "datetime" not in said and "lr=07:32:00" in said, said
