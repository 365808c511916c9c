"""A launch request, declared once: every option of a launch (`rmconsole run`, the TUI's launch
form) is one field of `LaunchRequest`, and that field carries its flags, its help, where it sits
on the form (if it does), its own check and whether every run stores it. The CLI derives `run`'s
options from these fields (cli/run_commands.py), the TUI derives its form's inputs from them
(tui/screens/launch.py), and both hand the request to `runner.launch` (queue.py), which starts a
run or a sweep. A new launch option is a new field here, plus what the runner does with it
(nothing more when it is `shared`: a Run column every run of the launch gets, store/runs.py).

Imports nothing of the runner at module level (launch.py, sweep.py and queue.py import it)."""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..config import ConfigError, shorten

MAX_SLOTS = 1024  # --parallel, --gpus and --nnodes beyond this are typing errors, not machines
MAX_NAME = 200  # characters of a run's name (`--name`, `rename`; a sweep's name template's widths)
SWEEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class Form:
    """Where an option sits on the TUI's launch form: the row's label (consecutive options with
    the same label share a row, `row_id` its container), the input's id and placeholder, and a
    line of help under the row."""

    label: str
    id: str
    placeholder: str = ""
    row_id: str | None = None
    help: str | None = None


@dataclass(frozen=True)
class Option:
    """A launch option's declaration (the metadata of a LaunchRequest field)."""

    flags: tuple[str, ...]
    help: str
    form: Form | None = None
    check: Callable[[Any], None] | None = None  # refuses a bad value in one line (ConfigError)
    repeatable: bool = False  # a flag given once per value; a tuple of them
    sweep_only: bool = False  # refused when the launch is one run
    shared: bool = False  # stored on every run of the launch (a Run column of the same name)


def option(default: Any, *flags: str, help: str, **declared: Any) -> Any:
    """A LaunchRequest field with its Option."""
    spec = Option(tuple(flags), help, **declared)
    if spec.repeatable:
        return field(default=tuple(default), metadata={"option": spec})
    return field(default=default, metadata={"option": spec})


def _count(flag: str, low: int, high: int) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value is not None and not low <= value <= high:
            raise ConfigError(f"{flag} {shorten(value)}: allowed: {low} to {high}")

    return check


def check_name(name: str | None) -> None:
    """A run's name: one line of printable text of at most MAX_NAME characters."""
    if name is not None and (not name.strip() or not name.isprintable() or len(name) > MAX_NAME):
        raise ConfigError(f"--name {shorten(name)!r}: give one line of printable text (at most {MAX_NAME} characters)")


def check_tags(tags: tuple[str, ...] | list[str] | None) -> None:
    """Tags: one word each (`+`/`-` are how `rmconsole tag` adds and removes them)."""
    for tag in tags or ():
        if (
            not tag
            or not tag.isprintable()
            or any(c.isspace() for c in tag)
            or tag[0] in "+-"
            or "," in tag
            or len(tag) > 64
        ):
            raise ConfigError(
                f"--tag {tag!r}: a tag is one word of printable characters without commas, "
                f"not starting with + or - (at most 64)"
            )


def check_sweep_name_form(name: str | None) -> None:
    """A sweep's name as typed (it becomes the sweep's id): letters, digits, '.', '_' and '-', not
    'last'. That no stored sweep has it is checked at launch (sweep.check_sweep_name)."""
    if name is None:
        return
    if not SWEEP_NAME.fullmatch(name):
        raise ConfigError(
            f"--sweep-name {name!r}: allowed: 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if name == "last":
        raise ConfigError("--sweep-name 'last': that word means the newest sweep; choose another name")


def split_overrides(text: str) -> list[str]:
    """`epochs=2 seed=3 augment="cutmix+autoaug"` → ['epochs=2', 'seed=3', 'augment="cutmix+autoaug"'] (shell quoting)."""
    try:
        return shlex.split(text, posix=False)
    except ValueError as err:
        raise ConfigError(f"overrides {text!r}: {err}") from None


@dataclass(frozen=True)
class LaunchRequest:
    """What to launch and how: one run, or a sweep when --set values or --seeds make a grid."""

    preset: str | None = option(None, "--preset", "-p", help="Preset name or TOML file (default: the digits demo).")
    overrides: tuple[str, ...] = option(
        (),
        "--set",
        "-s",
        help="Override a config key: KEY=VALUE (repeatable).",
        repeatable=True,
        form=Form(
            "Overrides",
            "overrides",
            "epochs=2 memory_size=500 augment=cutmix+autoaug",
            help="KEY=VALUE pairs separated by spaces, as `rmconsole run --set KEY=VALUE`; a comma "
            "list (method=rm,er) makes a sweep.",
        ),
    )
    seed: int | None = option(None, "--seed", help="Random seed (class order, stream, init).")
    device: str | None = option(None, "--device", help="auto | cpu | cuda | cuda:N")
    detach: bool = option(False, "--detach", "-d", help="Start the run and return at once.")
    seeds: str | None = option(
        None,
        "--seeds",
        help="A sweep over seeds: 1,2,3.",
        form=Form("Seeds (a sweep over them: 1,2,3)", "seeds", "1,2,3"),
    )
    parallel: int | None = option(
        None,
        "--parallel",
        "-j",
        help="Sweep slots (default: one per visible GPU, 1 on CPU).",
        check=_count("--parallel", 1, MAX_SLOTS),
    )
    gpus: int | None = option(
        None,
        "--gpus",
        help="Train on N GPUs of this node under torchrun (data parallel); "
        "with --set device=cpu, N CPU processes on gloo.",
        check=_count("--gpus", 1, MAX_SLOTS),
    )
    nnodes: int = option(
        1,
        "--nnodes",
        help="Nodes in a multi-node run (torchrun; see `rmconsole join`).",
        check=_count("--nnodes", 1, MAX_SLOTS),
    )
    node_rank: int | None = option(
        None, "--node-rank", help="This node's rank (0 for `run`).", check=_count("--node-rank", 0, MAX_SLOTS)
    )
    master_addr: str | None = option(None, "--master-addr", help="Node 0's address (static rendezvous).")
    master_port: int | None = option(
        None,
        "--master-port",
        help="Node 0's port (torchrun's default 29500).",
        check=_count("--master-port", 1, 65535),
    )
    rdzv_endpoint: str | None = option(None, "--rdzv-endpoint", help="HOST:PORT of a c10d rendezvous.")
    rdzv_id: str | None = option(None, "--rdzv-id", help="Job id shared by the nodes of a c10d rendezvous.")
    executor: str | None = option(
        None,
        "--executor",
        help="Where the runs' workers run: local (this "
        "machine, the default), slurm (a job per run, through submitit), "
        "submitit-local (the same job on this machine).",
    )
    slurm: tuple[str, ...] = option(
        (),
        "--slurm",
        help="Job options for --executor slurm: partition=P,time=MINUTES,"
        "gpus_per_run=N,cpus_per_run=N,mem_gb=G,account=A,qos=Q,constraint=C.",
        repeatable=True,
    )
    runs_per_gpu: int | None = option(
        None,
        "--runs-per-gpu",
        help="Runs sharing each GPU, each capped at "
        "1/N of its memory (local queue: N slots per GPU; slurm: N runs per job).",
    )
    name: str | None = option(
        None,
        "--name",
        "-n",
        help="What to call the run (a sweep: the start of each run's name, see --name-template).",
        form=Form("Name and tags", "name", "name (optional)", row_id="identity"),
        check=check_name,
    )
    tags: tuple[str, ...] = option(
        (),
        "--tag",
        "-t",
        help="A tag for the run (repeatable): filter with tag:T.",
        repeatable=True,
        form=Form("Name and tags", "tags", "tags: base k500", row_id="identity"),
        check=check_tags,
        shared=True,
    )
    sweep_name: str | None = option(
        None,
        "--sweep-name",
        help="Name the sweep (its id: `runs --sweep NAME`, `stop --sweep NAME`, `report --sweep NAME`).",
        form=Form(
            "Sweep name and run-name template (a sweep only)", "sweep-name", "sweep name (its id)", "sweep-identity"
        ),
        check=check_sweep_name_form,
        sweep_only=True,
    )
    name_template: str | None = option(
        None,
        "--name-template",
        help="Each sweep run's name: {name}, "
        "{method}, {seed}, {sweep}, {n} or any config key (default: the "
        "name then what varies, e.g. {name}·{method}·s{seed}).",
        form=Form(
            "Sweep name and run-name template (a sweep only)",
            "name-template",
            "e.g. {method}-s{seed}",
            "sweep-identity",
        ),
        sweep_only=True,
    )

    @classmethod
    def options(cls) -> Iterator[tuple[dataclasses.Field[Any], Option]]:
        """Every field with its declaration, in the order `run --help` and the form show them."""
        for f in dataclasses.fields(cls):
            yield f, f.metadata["option"]

    @classmethod
    def of(cls, **values: Any) -> LaunchRequest:
        """A request from options as a face has them (lists for repeatable ones, None for unset)."""
        declared = dict(cls.options())
        typed: dict[str, Any] = {}
        for f, spec in declared.items():
            if f.name in values:
                value = values[f.name]
                typed[f.name] = tuple(value or ()) if spec.repeatable else value
        unknown = set(values) - {f.name for f in declared}
        if unknown:
            raise TypeError(f"not a launch option: {', '.join(sorted(unknown))}")
        return cls(**typed)

    @classmethod
    def from_form(cls, preset: str, texts: dict[str, str], **values: Any) -> LaunchRequest:
        """A request from the launch form's inputs (`texts`: field name -> text as typed): repeatable
        options split (overrides as a shell would, tags on spaces and commas), empty text unset."""
        typed: dict[str, Any] = {"preset": preset, **values}
        for f, spec in cls.options():
            if spec.form is None or f.name not in texts:
                continue
            text = texts[f.name]
            if f.name == "overrides":
                typed[f.name] = tuple(split_overrides(text))
            elif spec.repeatable:
                typed[f.name] = tuple(text.replace(",", " ").split())
            else:
                typed[f.name] = text.strip() or None
        return cls(**typed)

    def check(self) -> LaunchRequest:
        """Every option's own check, and the rules between options that need no config and no
        store (one line each, ConfigError); returns the request."""
        for f, spec in self.options():
            if spec.check is not None:
                spec.check(getattr(self, f.name))
        if self.seed is not None and self.seeds is not None:
            raise ConfigError("give either --seed or --seeds, not both")
        return self

    def check_one_run(self) -> None:
        """The options that name a sweep are refused when the launch makes one run."""
        for f, spec in self.options():
            if spec.sweep_only and getattr(self, f.name) is not None:
                raise ConfigError(
                    f"{spec.flags[0]} is for a sweep, and this starts one run (a sweep: comma-separated "
                    f"--set values or --seeds 1,2)"
                )

    def shared(self) -> dict[str, Any]:
        """What every run of the launch stores as given (`Option.shared`), by column name."""
        out: dict[str, Any] = {}
        for f, spec in self.options():
            if spec.shared:
                value = getattr(self, f.name)
                out[f.name] = list(dict.fromkeys(value)) if spec.repeatable else value
        return out

    def executor_spec(self) -> Any:
        """--executor, --slurm and --runs-per-gpu as an executors.ExecutorSpec (None: local)."""
        from .executors import parse_executor

        return parse_executor(self.executor, list(self.slurm), self.runs_per_gpu)

    def rendezvous(self) -> Any:
        """The multi-node options as a checked multigpu.Rendezvous."""
        from .multigpu import Rendezvous

        return Rendezvous(
            self.nnodes, self.node_rank, self.master_addr, self.master_port, self.rdzv_endpoint, self.rdzv_id
        ).check()
