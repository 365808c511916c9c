"""A run's config: one validated model of a run, built from a preset file plus overrides.

A run's keys are the ones every run has (each declared once, in `cl/settings.py`'s `RunSettings`)
plus ONLY its method's own parameters: each method declares them in its params class (a
torch-free `MethodParams` beside the method, named by its `MethodSpec`; built-ins and plug-ins
alike, `rmconsole.methods`). `config_model(spec)` is the pydantic model of that method's runs (a
`RunConfig` subclass); `to_dict()`, what is stored, is flat: the common keys, then the method's.

Every bad value is rejected here, before anything is stored, with one line that names the key,
the value and what is allowed:
- a key of another method (`--set bic_temperature=3` on an RM run) is refused naming the
  methods that read it (`bic_temperature=3: read by bic, bic_star, not by method=rm`);
- a key no method reads is `unknown config key 'x'`, with a did-you-mean.

A preset's top-level keys that the run's method does not read (another method's parameters) are
dropped for that run, so a BiC preset run with `--set method=rm` works; a preset's
`[methods.X]` table applies to method X only, and its keys must be X's (or common). A stored
config is rebuilt the same way (`build_config(run.config)`), so a run stored by an earlier
version, which holds every method's keys (~61), still rebuilds, resumes and compares. A sweep
applies a method's key to the grid points whose method reads it (runner/sweep.py).

One module per job: errors.py (how a message is written), model.py (the pydantic model from the
declarations, the checks across keys, `config_model`), checks.py (key checks and their one-line
messages), presets.py (the preset files), load.py (overrides, merging, `build_config`,
`load_config`, defaults), view.py (which keys a run reads, `config_view`), keytable.py
(`rmconsole config-keys`, docs/configuration.md, `run --help`'s keys). What the rest of rmconsole
uses is re-exported here, so `from rmconsole.config import X` is the way in.
"""

from __future__ import annotations

from ..cl.settings import MAX_INT
from .checks import method_keys, not_read
from .errors import ConfigError, shorten, show_value, twice
from .keytable import choices_of, configuration_page, essential_keys_help, key_table
from .load import (
    build_config,
    checked_value,
    config_defaults,
    for_method,
    load_config,
    method_key_defaults,
    method_of,
    overrides_of,
    parse_overrides,
    parse_value,
    split_override,
)
from .model import COMMON_KEYS, KEYS, RunConfig, config_model
from .presets import DEFAULT_PRESET, plugin_presets, preset_description, preset_dir, preset_names, read_preset
from .view import TASK_FREE_ONLY, config_view, method_reads, reads_on_task_free

__all__ = [
    "COMMON_KEYS",
    "DEFAULT_PRESET",
    "KEYS",
    "MAX_INT",
    "TASK_FREE_ONLY",
    "ConfigError",
    "RunConfig",
    "build_config",
    "checked_value",
    "choices_of",
    "config_defaults",
    "config_model",
    "config_view",
    "configuration_page",
    "essential_keys_help",
    "for_method",
    "key_table",
    "load_config",
    "method_key_defaults",
    "method_keys",
    "method_of",
    "method_reads",
    "not_read",
    "overrides_of",
    "parse_overrides",
    "parse_value",
    "plugin_presets",
    "preset_description",
    "preset_dir",
    "preset_names",
    "read_preset",
    "reads_on_task_free",
    "shorten",
    "show_value",
    "split_override",
    "twice",
]
