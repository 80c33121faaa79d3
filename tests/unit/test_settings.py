"""Each setting is declared once, in Config: everything that lists settings is derived from it."""

from __future__ import annotations

import dataclasses
import logging
import os
import re

import pytest

from workerscope import config
from workerscope.config import (
    JOB_SETTINGS,
    LINK_SETTINGS,
    PROCESS_VARIABLES,
    SETTINGS,
    Config,
    Options,
    Scope,
    job_values,
    link_key,
    resolve,
    variables,
)
from workerscope.errors import ConfigError
from workerscope.worker.jobs import monitor, profiled

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")

# A valid value other than the default for every setting, to check that each is taken.
KEY = "A" * 42 + "A"
OTHER = {
    "mode": "heavy", "interval": 0.25, "endpoint": f"tcp://127.0.0.1:5999?curve={KEY},{KEY}",
    "out": "x-{pid}.wsc", "node": "n1", "bye_timeout": 0.5, "ring_records": 1024,
    "samples_per_frame": 3, "send_queue": 77, "span_cpu": True, "reset_peak": False,
    "stacks_memory": 0.5, "stacks_after": 12.5, "stacks_every": 2.0, "allocations": 5, "gpus": "all",
}


def test_other_values_cover_every_setting():
    """The table of values the tests below give names every setting, and none is a default."""
    assert set(OTHER) == {f.name for f in dataclasses.fields(Config)}
    for s in SETTINGS:
        assert OTHER[s.name] != s.default, s.name


def test_options_typeddict_lists_every_setting():
    """The keyword options' type (profiled, monitor, the engines) has one key per setting."""
    assert set(Options.__annotations__) == {s.name for s in SETTINGS}


def test_every_setting_has_a_variable_a_scope_and_a_doc():
    """Each field of Config carries its variable, scope, parser and a line of docs."""
    for s in SETTINGS:
        assert s.env == "WORKERSCOPE_" + s.name.upper()
        assert s.scope in (Scope.LINK, Scope.JOB)
        assert len(s.doc) > 20
    assert set(LINK_SETTINGS) | set(JOB_SETTINGS) == {s.name for s in SETTINGS}
    assert "reset_peak" in JOB_SETTINGS and "mode" in JOB_SETTINGS and "out" in JOB_SETTINGS


def test_link_key_holds_link_settings_only():
    """Two configs that differ in a job setting share a sidecar; in a link setting they don't."""
    base = resolve({})
    for name in JOB_SETTINGS:
        assert link_key(dataclasses.replace(base, **{name: OTHER[name]})) == link_key(base)
    for name in LINK_SETTINGS:
        assert link_key(dataclasses.replace(base, **{name: OTHER[name]})) != link_key(base)
    assert job_values(dataclasses.replace(base, reset_peak=False))["reset_peak"] is False


def test_readme_lists_every_variable():
    """README's settings tables name every WORKERSCOPE_* variable, and no other."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    rows = set(re.findall(r"^\| `[a-z_]*`? ?\|? ?`?(WORKERSCOPE_[A-Z_]+)`", text, re.M))
    rows |= set(re.findall(r"^\| `(WORKERSCOPE_[A-Z_]+)` \|", text, re.M))
    assert rows == set(variables())
    mentioned = set(re.findall(r"WORKERSCOPE_[A-Z_]*[A-Z]", text))
    assert mentioned <= set(variables()), mentioned - set(variables())


def test_every_variable_overrides_its_setting():
    """Each variable, set to a valid value, becomes the setting's value."""
    env = {s.env: str(OTHER[s.name]) for s in SETTINGS}
    c = resolve(env)
    for s in SETTINGS:
        assert getattr(c, s.name) == OTHER[s.name], s.name


def test_profiled_and_monitor_accept_every_setting(clean_env):
    """profiled() and monitor() take every setting as a keyword option."""
    assert resolve(**profiled(len, **OTHER).options) == resolve(**OTHER)
    assert monitor(**{**OTHER, "out": None}).config == resolve(**{**OTHER, "out": None})


def test_monitor_defaults_to_heavy_and_honours_mode(clean_env):
    """monitor() is heavy unless told; mode (argument or WORKERSCOPE_MODE) is honoured."""
    assert monitor().config.mode == "heavy"
    assert monitor(mode="light").config.mode == "light"
    clean_env.setenv("WORKERSCOPE_MODE", "off")
    m = monitor()
    assert m.config.mode == "off"
    with m:
        pass
    assert m.timeline is None


def test_process_variables_are_read_through_config(monkeypatch):
    """The variables that set up a process are declared, and read only through config."""
    monkeypatch.setenv("WORKERSCOPE_PURE_PYTHON", "1")
    assert config.process_variable("WORKERSCOPE_PURE_PYTHON") == "1"
    with pytest.raises(KeyError):
        config.process_variable("WORKERSCOPE_NOT_DECLARED")
    assert set(PROCESS_VARIABLES) <= set(variables())
    package = os.path.join(os.path.dirname(config.__file__))
    for folder, _, files in os.walk(package):
        for name in files:
            if name.endswith(".py") and name != "config.py":
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    text = f.read()
                assert not re.search(r"environ(\.get)?[\[(]\s*[\"']WORKERSCOPE_", text), name


def test_repr_and_errors_leave_the_secret_key_out():
    """A Config's repr and a bad variable's message never show the endpoint's secret key."""
    secret = "S" * 42 + "A"
    endpoint = f"tcp://127.0.0.1:5999?curve={KEY},{secret}"
    c = resolve(endpoint=endpoint)
    assert secret not in repr(c) and "curve=..." in repr(c)
    with pytest.raises(ConfigError) as err:
        resolve({"WORKERSCOPE_ENDPOINT": f"tcp://h:1?curve={secret},x"})
    assert secret not in str(err.value)


def test_a_typo_in_a_variable_is_said_once(monkeypatch, caplog):
    """A WORKERSCOPE_* variable that is no setting is said once, with the nearest name."""
    monkeypatch.setenv("WORKERSCOPE_INTERVALL", "0.1")
    config._warned.discard("WORKERSCOPE_INTERVALL")
    with caplog.at_level(logging.WARNING, logger="workerscope"):
        resolve()
        resolve()
    said = [r.getMessage() for r in caplog.records if "INTERVALL" in r.getMessage()]
    assert len(said) == 1 and "WORKERSCOPE_INTERVAL?" in said[0]


def test_a_bad_variable_never_breaks_making_a_job(clean_env, caplog):
    """WORKERSCOPE_INTERVAL=abc where a module's @profiled is imported (a pool worker), or a
    monitor() is made: both are made, with the settings given (they raised ConfigError, which
    breaks a process pool while it unpickles its task)."""
    clean_env.setenv("WORKERSCOPE_INTERVAL", "abc")
    wrapped = profiled(len, mode="off")
    assert wrapped([1, 2]) == 2
    with caplog.at_level(logging.WARNING, logger="workerscope"):
        m = monitor(mode="off", interval=0.5)
    assert m.config.interval == 0.5
    assert any("WORKERSCOPE_INTERVAL" in r.getMessage() for r in caplog.records)


def test_a_bad_argument_is_refused_even_where_a_variable_overrides_it():
    """interval=0 is refused though WORKERSCOPE_INTERVAL=0.5 overrides it here: elsewhere,
    where no variable does, the job would have failed (it was never checked)."""
    with pytest.raises(ConfigError, match="interval"):
        resolve({"WORKERSCOPE_INTERVAL": "0.5"}, interval=0)
    assert resolve({"WORKERSCOPE_INTERVAL": "0.5"}, interval=2.0).interval == 0.5
