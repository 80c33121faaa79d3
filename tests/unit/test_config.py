"""Settings: defaults, validation with clear errors, WORKERSCOPE_* overrides."""

from __future__ import annotations

import pytest

from workerscope import profiled
from workerscope.config import Config, resolve
from workerscope.errors import ConfigError


def test_defaults(clean_env):
    """With nothing given, mode is light and the interval one second."""
    clean_env.delenv("WORKERSCOPE_BYE_TIMEOUT", raising=False)  # conftest.TEST_ENV sets it
    assert resolve() == Config()
    assert resolve().mode == "light" and resolve().interval == 1.0


@pytest.mark.parametrize("interval", [0.001, 0.0099, 3601, -1, float("nan")])
def test_interval_out_of_range(clean_env, interval):
    """An interval outside 0.01..3600 s is a ConfigError naming the range."""
    with pytest.raises(ConfigError, match=r"between 0\.01 and 3600"):
        resolve(interval=interval)


@pytest.mark.parametrize("interval", [0.01, 1, 3600])
def test_interval_bounds_accepted(clean_env, interval):
    """The bounds themselves are accepted."""
    assert resolve(interval=interval).interval == interval


def test_env_overrides_arguments(clean_env):
    """A WORKERSCOPE_* variable wins over the argument, so operators can flip deployed jobs."""
    clean_env.setenv("WORKERSCOPE_MODE", "HEAVY")
    clean_env.setenv("WORKERSCOPE_INTERVAL", "0.25")
    clean_env.setenv("WORKERSCOPE_ENDPOINT", "tcp://127.0.0.1:5555")
    c = resolve(mode="off", interval=2.0)
    assert (c.mode, c.interval, c.endpoint) == ("heavy", 0.25, "tcp://127.0.0.1:5555")


def test_bad_values_are_clear(clean_env):
    """Bad mode, non-numeric interval and malformed endpoints each get a message saying why."""
    with pytest.raises(ConfigError, match="mode must be one of"):
        resolve(mode="medium")
    clean_env.setenv("WORKERSCOPE_INTERVAL", "fast")
    with pytest.raises(ConfigError, match="number of seconds"):
        resolve()
    clean_env.delenv("WORKERSCOPE_INTERVAL")
    with pytest.raises(ConfigError, match="ZeroMQ address"):
        resolve(endpoint="localhost:5555")


def test_profiled_rejects_bad_options_at_wrap_time(clean_env):
    """A bad option fails when the wrapper is made in the driver, not in every worker."""
    with pytest.raises(ConfigError):
        profiled(print, interval=0)


def test_samples_per_frame(clean_env):
    """samples_per_frame is a whole number 1..10000, from the argument or its variable."""
    assert resolve(samples_per_frame=5).samples_per_frame == 5
    clean_env.setenv("WORKERSCOPE_SAMPLES_PER_FRAME", "12")
    assert resolve(samples_per_frame=5).samples_per_frame == 12
    for bad in ("0", "x", "2.5"):
        clean_env.setenv("WORKERSCOPE_SAMPLES_PER_FRAME", bad)
        with pytest.raises(ConfigError, match="samples_per_frame"):
            resolve()
