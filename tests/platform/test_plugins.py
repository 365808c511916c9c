"""plugins.py: entry points listed without importing, loaded on first use with one-line errors,
provenance (package, version, folder, git commit, dirty), the sources digest the warm server is
keyed on, and the presets a plug-in package ships.

The installed packages here are real distributions as importlib.metadata finds them (a
`NAME.dist-info` folder with METADATA, entry_points.txt and direct_url.json on sys.path), written
into tmp_path: no pip, so these run in milliseconds. tests/platform/test_plugins_installed.py and test_scaffold_new.py
install real packages with pip in a throwaway venv."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from support.plugin_venv import git

from rmconsole import plugins


def write_dist(
    site: Path, name: str, entry_points: dict[str, dict[str, str]], version: str = "0.1", direct_url: dict | None = None
) -> Path:
    """A distribution's metadata in `site` (as pip would leave it), entry points by group."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items())
            for group, entries in entry_points.items()
        )
    )
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return info


def editable(folder: Path) -> dict:
    return {"url": "file://" + quote(str(folder)), "dir_info": {"editable": True}}


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fresh site folder on sys.path; plugins' cache and the test's modules dropped after."""
    folder = tmp_path / "site packages"  # (a space: the direct_url is percent-encoded)
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delenv("RMCONSOLE_NO_PLUGINS", raising=False)
    before = set(sys.modules)
    plugins.forget()
    yield folder
    plugins.forget()
    for name in set(sys.modules) - before:
        if name.startswith("plug"):
            del sys.modules[name]


def test_listed_without_importing_and_loaded_on_first_use(site: Path) -> None:
    (site / "plugone").mkdir()
    (site / "plugone" / "__init__.py").write_text("METHOD = {'name': 'one'}\n")
    write_dist(site, "plug-one", {"rmconsole.methods": {"one": "plugone:METHOD"}})
    found = plugins.available("method")
    assert found["one"].package == "plug-one" and found["one"].target == "plugone:METHOD"
    assert "plugone" not in sys.modules  # listing imports nothing
    assert plugins.load("method", "one") == {"name": "one"}
    assert "plugone" in sys.modules
    assert plugins.load("method", "one") is plugins.load("method", "one")  # once
    assert plugins.available("dataset") == {}
    with pytest.raises(ValueError, match="unknown plug-in kind 'methods'"):
        plugins.available("methods")


def test_a_plugin_that_fails_to_import_is_one_line_naming_it_and_its_package(site: Path) -> None:
    (site / "plugbroken").mkdir()
    (site / "plugbroken" / "__init__.py").write_text("import no_such_module_here\n")
    write_dist(site, "plug-broken", {"rmconsole.methods": {"broken": "plugbroken:METHOD"}}, version="2.3")
    with pytest.raises(plugins.PluginError) as err:
        plugins.load("method", "broken")
    text = str(err.value)
    assert "\n" not in text and "Traceback" not in text
    assert "'broken'" in text and "plug-broken 2.3" in text and "ModuleNotFoundError" in text
    assert "no_such_module_here" in text
    with pytest.raises(plugins.PluginError, match="no method plug-in named 'nothing'"):
        plugins.load("method", "nothing")
    (site / "plugbroken" / "__init__.py").write_text("OTHER = 1\n")  # imports, lacks the attribute
    with pytest.raises(plugins.PluginError, match="AttributeError"):
        plugins.load("method", "broken")


def test_one_name_in_two_packages_is_refused_naming_both(site: Path) -> None:
    for pkg in ("plugx", "plugy"):
        (site / pkg).mkdir()
        (site / pkg / "__init__.py").write_text("METHOD = 1\n")
    write_dist(site, "plug-x", {"rmconsole.methods": {"same": "plugx:METHOD"}})
    write_dist(site, "plug-y", {"rmconsole.methods": {"same": "plugy:METHOD"}})
    assert "same" in plugins.available("method")
    with pytest.raises(plugins.PluginError, match=r"declared by 2 packages \(plug-[xy], plug-[xy]\)"):
        plugins.load("method", "same")
    assert not {"plugx", "plugy"} & set(sys.modules)


def test_the_same_distribution_twice_on_the_path_is_one_plugin(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    later = tmp_path / "later"
    later.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(later)])
    write_dist(site, "Plug_Twice", {"rmconsole.methods": {"twice": "plugtwice:M"}}, version="2")
    write_dist(later, "plug-twice", {"rmconsole.methods": {"twice": "plugtwice:M"}}, version="1")
    plugins.forget()
    assert plugins.available("method")["twice"].version == "2"  # the first on sys.path, as import finds it
    (site / "plugtwice.py").write_text("M = 2\n")
    assert plugins.load("method", "twice") == 2  # not refused as a clash with itself


def test_one_packages_malformed_entry_points_leave_the_others_listed(site: Path) -> None:
    write_dist(site, "plug-one", {"rmconsole.methods": {"one": "plugone:METHOD"}})
    info = write_dist(site, "plug-bad", {})
    (info / "entry_points.txt").write_text("[rmconsole.methods]\nthis line has no equals sign\n")
    other = write_dist(site, "not-a-plugin", {})
    (other / "entry_points.txt").write_text("[console_scripts]\nbroken too\n")
    assert list(plugins.available("method")) == ["one"]
    found = plugins.problems()  # (a package that declares none of ours is no news)
    assert len(found) == 1 and found[0].startswith("package plug-bad 0.1: its entry_points.txt cannot be read (")
    assert found[0].endswith("); its plug-ins are left out") and "\n" not in found[0]
    assert plugins.sources_digest()


def test_escape_hatch_lists_nothing(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_dist(site, "plug-one", {"rmconsole.methods": {"one": "plugone:METHOD"}})
    monkeypatch.setenv("RMCONSOLE_NO_PLUGINS", "1")
    plugins.forget()
    assert plugins.available("method") == {}


def test_packages_in_an_ignored_folder_are_not_read(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RMCONSOLE_PLUGIN_IGNORE: what the suite sets to its interpreter's site-packages (conftest), so
    a plug-in the user installed there never shows in a test."""
    import conftest

    assert set(conftest.INTERPRETER_SITES) <= set(os.environ["RMCONSOLE_PLUGIN_IGNORE"].split(os.pathsep))
    write_dist(site, "plug-one", {"rmconsole.methods": {"one": "plugone:METHOD"}})
    other = tmp_path / "user site"
    other.mkdir()
    monkeypatch.syspath_prepend(str(other))
    write_dist(other, "plug-theirs", {"rmconsole.methods": {"theirs": "plugtheirs:METHOD"}})
    plugins.forget()
    assert sorted(plugins.available("method")) == ["one", "theirs"]
    ignored = os.environ["RMCONSOLE_PLUGIN_IGNORE"].split(os.pathsep)
    monkeypatch.setenv(
        "RMCONSOLE_PLUGIN_IGNORE", os.pathsep.join([*ignored, "/nowhere", str(other / ".." / "user site")])
    )
    plugins.forget()
    assert list(plugins.available("method")) == ["one"]


def test_provenance_of_an_editable_checkout_names_its_commit_and_dirtiness(site: Path, tmp_path: Path) -> None:
    checkout = tmp_path / "my checkout"
    (checkout / "plugprov").mkdir(parents=True)
    (checkout / "plugprov" / "__init__.py").write_text("M = 1\n")
    git(checkout, "init", "-q", "-b", "main")
    git(checkout, "add", ".")
    git(checkout, "commit", "-q", "-m", "one")
    write_dist(
        site, "plug-prov", {"rmconsole.methods": {"prov": "plugprov:M"}}, version="0.3", direct_url=editable(checkout)
    )
    head = git(checkout, "rev-parse", "HEAD")
    found = plugins.provenance("method", "prov")
    assert found == {
        "kind": "method",
        "name": "prov",
        "package": "plug-prov",
        "version": "0.3",
        "path": str(checkout),
        "commit": head,
        "dirty": False,
    }
    (checkout / "plugprov" / "__init__.py").write_text("M = 2\n")
    assert plugins.provenance("method", "prov")["dirty"] is True
    git(checkout, "commit", "-q", "-am", "two")
    git(checkout, "pack-refs", "--all")  # the branch's ref now only in packed-refs
    assert not (checkout / ".git" / "refs" / "heads" / "main").exists()
    found = plugins.provenance("method", "prov")
    assert found["commit"] == git(checkout, "rev-parse", "HEAD") != head and found["dirty"] is False
    assert plugins.provenance("method", "rm") is None  # no plug-in of that name: a built-in's, nothing to say


def test_provenance_in_a_git_worktree(site: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "f.py").write_text("x = 1\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    git(repo, "worktree", "add", "-q", "-b", "side", "../wt")
    wt = tmp_path / "wt"
    (wt / "f.py").write_text("x = 2\n")
    git(wt, "commit", "-q", "-am", "side")
    # a relative gitdir, as `git worktree add` writes with worktree.useRelativePaths or a moved checkout
    (wt / ".git").write_text("gitdir: ../repo/.git/worktrees/wt\n")
    write_dist(site, "plug-wt", {"rmconsole.methods": {"wt": "f:x"}}, direct_url=editable(wt))
    found = plugins.provenance("method", "wt")
    assert found["commit"] == git(wt, "rev-parse", "HEAD") != git(repo, "rev-parse", "HEAD")


def test_provenance_of_a_copy_and_of_a_git_url(site: Path, tmp_path: Path) -> None:
    write_dist(
        site,
        "plug-copy",
        {"rmconsole.methods": {"copy": "plugcopy:M"}},
        direct_url={"url": "file://" + quote(str(tmp_path / "src")), "dir_info": {}},
    )
    write_dist(
        site,
        "plug-vcs",
        {"rmconsole.datasets": {"vcs": "plugvcs:D"}},
        direct_url={"url": "https://example.org/plug.git", "vcs_info": {"vcs": "git", "commit_id": "abc123"}},
    )
    write_dist(site, "plug-index", {"rmconsole.metrics": {"idx": "plugidx:M"}})
    assert plugins.provenance("method", "copy") == {
        "kind": "method",
        "name": "copy",
        "package": "plug-copy",
        "version": "0.1",
        "installed_from": str(tmp_path / "src"),
    }
    assert plugins.provenance("dataset", "vcs")["url"] == "https://example.org/plug.git"
    assert plugins.provenance("dataset", "vcs")["commit"] == "abc123"
    assert plugins.provenance("metric", "idx") == {
        "kind": "metric",
        "name": "idx",
        "package": "plug-index",
        "version": "0.1",
    }


def test_sources_digest_changes_when_an_editable_plugin_is_edited_or_installed(site: Path, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "plugdig").mkdir(parents=True)
    source = checkout / "plugdig" / "impl.py"
    source.write_text("X = 1\n")
    empty = plugins.sources_digest()
    write_dist(site, "plug-dig", {"rmconsole.methods": {"dig": "plugdig.declare:M"}}, direct_url=editable(checkout))
    installed = plugins.sources_digest()  # read afresh: no forget() needed (a long-lived TUI launches too)
    assert installed != empty
    assert plugins.sources_digest() == installed  # nothing changed: the same server
    venv = checkout / ".venv"  # a checkout's own virtual environment is not its source
    (venv / "lib").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr\n")
    (venv / "lib" / "big.py").write_text("Y = 1\n")
    (checkout / "build" / "lib").mkdir(parents=True)
    (checkout / "build" / "lib" / "old.py").write_text("Z = 1\n")
    assert plugins.sources_digest() == installed
    source.write_text("X = 22\n")  # edited: size and mtime
    edited = plugins.sources_digest()
    assert edited != installed
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # only touched: mtime
    assert plugins.sources_digest() != edited
    touched = plugins.sources_digest()
    write_dist(
        site,
        "plug-dig",
        {"rmconsole.methods": {"dig": "plugdig.declare:M", "dig2": "plugdig.declare:N"}},
        direct_url=editable(checkout),
    )  # re-installed with a new entry point
    assert plugins.sources_digest() != touched


def test_sources_digest_of_an_editable_checkout_reads_its_packages_not_its_data(site: Path, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "src" / "plugcode").mkdir(parents=True)
    (checkout / "src" / "plugcode" / "__init__.py").write_text("M = 1\n")
    (checkout / "src" / "plughelper.py").write_text("H = 1\n")  # a second top-level module (top_level.txt)
    (checkout / "outputs" / "run1").mkdir(parents=True)
    info = write_dist(site, "plug-code", {"rmconsole.methods": {"code": "plugcode:M"}}, direct_url=editable(checkout))
    (info / "top_level.txt").write_text("plugcode\nplughelper\n")
    sys.path.insert(0, str(checkout / "src"))  # as the editable install's .pth or finder puts it
    try:
        before = plugins.sources_digest()
        (checkout / "outputs" / "run1" / "notes.py").write_text("# an experiment's output, not the plug-in's code\n")
        assert plugins.sources_digest() == before
        (checkout / "src" / "plughelper.py").write_text("H = 2\n")
        helper = plugins.sources_digest()
        assert helper != before
        (checkout / "src" / "plugcode" / "__init__.py").write_text("M = 22\n")
        assert plugins.sources_digest() != helper
        assert "plugcode" not in sys.modules and "plughelper" not in sys.modules  # found, never imported
    finally:
        sys.path.remove(str(checkout / "src"))


def test_sources_digest_of_a_regular_install_reads_its_recorded_files(site: Path) -> None:
    (site / "plugreg").mkdir()
    (site / "plugreg" / "__init__.py").write_text("M = 1\n")
    info = write_dist(site, "plug-reg", {"rmconsole.methods": {"reg": "plugreg:M"}})
    (info / "RECORD").write_text(f"plugreg/__init__.py,,\n{info.name}/METADATA,,\n")
    before = plugins.sources_digest()
    (site / "plugreg" / "__init__.py").write_text("M = 12\n")
    assert plugins.sources_digest() != before


def test_preset_files_found_without_importing_the_package(site: Path) -> None:
    presets = site / "plugpre" / "presets"
    presets.mkdir(parents=True)
    (site / "plugpre" / "__init__.py").write_text("raise ImportError('must not be imported to list presets')\n")
    (presets / "mine-digits.toml").write_text('method = "mine"\n')
    (presets / "mine-mnist.toml").write_text('method = "mine"\n')
    (presets / "notes.txt").write_text("not a preset\n")
    write_dist(site, "plug-pre", {"rmconsole.presets": {"pre": "plugpre.presets"}})
    write_dist(site, "plug-gone", {"rmconsole.presets": {"gone": "plugnothere.presets"}})
    found, problems = plugins.preset_files()
    assert sorted(found) == ["mine-digits", "mine-mnist"]
    assert found["mine-digits"][0] == presets / "mine-digits.toml" and found["mine-digits"][1].package == "plug-pre"
    assert problems == [
        "preset plug-in 'gone' (package plug-gone 0.1): no package folder 'plugnothere.presets' to read presets from"
    ]
    assert "plugpre" not in sys.modules
    other = site / "plugpre2" / "presets"
    other.mkdir(parents=True)
    (other / "mine-mnist.toml").write_text('method = "other"\n')
    write_dist(site, "plug-pre2", {"rmconsole.presets": {"pre2": "plugpre2.presets"}})
    plugins.forget()
    found, problems = plugins.preset_files()
    assert sorted(found) == ["mine-digits"]  # one name, two packages: neither
    assert any("'mine-mnist' is shipped by two packages (plug-pre, plug-pre2)" in p for p in problems)


def test_check_name_refuses_a_builtins_name() -> None:
    with pytest.raises(plugins.PluginError, match="'rm' has a built-in's name"):
        plugins.check_name("method", "rm", {"rm": object()})
    plugins.check_name("method", "mine", {"rm": object()})


def test_a_run_records_the_plugins_its_config_names_and_this_process_loaded(site: Path, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "plugused").mkdir(parents=True)
    (checkout / "plugused" / "__init__.py").write_text("M = 'spec'\nD = 'data'\n")
    git(checkout, "init", "-q")
    git(checkout, "add", ".")
    git(checkout, "commit", "-q", "-m", "one")
    sys.path.insert(0, str(checkout))
    try:
        write_dist(
            site,
            "plug-used",
            {
                "rmconsole.methods": {"mine": "plugused:M", "other": "plugused:M"},
                "rmconsole.datasets": {"rm": "plugused:D"},
            },
            version="1.2",
            direct_url=editable(checkout),
        )
        config = {"method": "mine", "dataset": "rm", "model": "mlp"}
        assert plugins.used_by(config) == []  # nothing loaded yet: nothing claimed
        plugins.load("method", "mine")
        plugins.load("method", "other")  # loaded (a listing did) but not this run's method
        used = plugins.used_by(config)
        assert used == [
            {
                "kind": "method",
                "name": "mine",
                "package": "plug-used",
                "version": "1.2",
                "path": str(checkout),
                "commit": git(checkout, "rev-parse", "HEAD"),
                "dirty": False,
            }
        ]
        # the dataset's name is a plug-in's too, but no registry loaded it (a built-in's name means the
        # built-in): nothing recorded for it
        assert plugins.provenance_text(used[0]) == (
            f"method mine: package plug-used 1.2, {checkout} @ {used[0]['commit'][:12]}"
        )
        assert plugins.provenance_text({**used[0], "dirty": True}).endswith(" (uncommitted changes)")
    finally:
        sys.path.remove(str(checkout))


def test_the_store_keeps_a_runs_plugins_with_its_versions_and_show_prints_them(isolated_home: Path, capsys) -> None:
    from rmconsole import cli, store
    from rmconsole.cl.events import TaskPlan
    from rmconsole.config import load_config

    _, cfg = load_config(None)
    run_id = store.create_run(cfg.to_dict(), "digits")
    store.claim_run(run_id, versions={"rmconsole": "0.1.0", "torch": "2"})
    entry = {
        "kind": "method",
        "name": "mine",
        "package": "plug-used",
        "version": "1.2",
        "path": "/src/mine",
        "commit": "0123456789abcdef0123",
        "dirty": True,
    }
    plans = [TaskPlan(t, 10, [t], [1] * 5, f"h{t}") for t in range(5)]
    store.record_start(run_id, plans, list(range(5)), [str(i) for i in range(5)], ["normalize"], plugins=[entry])
    versions = store.get_run(run_id).versions
    assert versions["rmconsole"] == "0.1.0" and versions["plugins"] == [entry]  # added to, not replaced
    capsys.readouterr()
    cli.show(str(run_id), as_json=False)
    assert "plug-in method mine: package plug-used 1.2, /src/mine @ 0123456789ab (uncommitted changes)" in " ".join(
        capsys.readouterr().out.split()
    )  # (wrapped at the terminal's width)
    cli.show(str(run_id), as_json=True)
    assert json.loads(capsys.readouterr().out)["versions"]["plugins"] == [entry]
    store.record_start(run_id, plans, list(range(5)), [str(i) for i in range(5)], ["normalize"], plugins=[])
    assert store.get_run(run_id).versions["plugins"] == [entry]  # (a built-in run's start adds nothing)
    builtin = store.create_run(cfg.to_dict(), "digits")
    store.record_start(builtin, plans, list(range(5)), [str(i) for i in range(5)], ["normalize"], plugins=[])
    cli.show(str(builtin), as_json=False)
    shown = capsys.readouterr().out
    assert f"run {builtin}" in shown and "plug-in" not in shown


def test_config_keys_names_the_installed_backbones_and_datasets(site: Path) -> None:
    """docs/datasets.md: `config-keys` lists the models. With a backbone plug-in installed it said
    "mlp400, resnet18, resnet32, resnet34, or an installed plug-in's" and never which: the names
    are listed now (not imported), as the methods' are; the generated page keeps the built-ins."""
    from rmconsole.config import key_table

    write_dist(
        site,
        "plug-parts",
        {"rmconsole.models": {"mlp7": "plugparts:SPEC"}, "rmconsole.datasets": {"birds": "plugparts:DATA"}},
    )
    allowed = {row.key: row.allowed for row in key_table()}
    assert allowed["model"].endswith("(installed: mlp7)") and allowed["dataset"].endswith("(installed: birds)")
    assert "plugparts" not in sys.modules  # listed without importing
    page = {row.key: row.allowed for row in key_table(plugins_too=False)}
    assert "mlp7" not in page["model"] and "birds" not in page["dataset"]


def test_data_list_shows_a_plugins_package_whole_at_80_columns(site: Path) -> None:
    """docs/extending.md: `rmconsole data list` shows the plug-in "with its package"; at 80
    columns it showed `plug-in rmconsole-mnist-fash… 0.1.0`."""
    from typer.testing import CliRunner

    from rmconsole import cli

    (site / "plugbirds").mkdir()
    (site / "plugbirds" / "__init__.py").write_text(
        "from rmconsole.cl.datasets import DatasetSpec\n"
        "SPEC = DatasetSpec(name='birds', description='my birds, an ImageFolder tree', folder='/nonexistent/birds')\n"
    )
    write_dist(
        site, "rmconsole-birds-of-the-world", {"rmconsole.datasets": {"birds": "plugbirds:SPEC"}}, version="2.7.1"
    )
    plugins.forget()  # (importing the CLI read the installed plug-ins for its help texts)
    out = CliRunner().invoke(cli.app, ["data", "list"], env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    assert "rmconsole-birds-of-the-world" in out.output and "2.7.1" in out.output, out.output
