"""agentrun_core.envconf: unset/blank means the default; anything else parses or names the variable."""

from __future__ import annotations

import pytest

from agent_operator import settings as operator_settings
from agent_worker import settings as worker_settings
from agentrun_core import envconf, errors


def test_blank_is_the_default() -> None:
    env = {"A": "", "B": "   "}
    assert envconf.integer(env, "A", 7) == 7 and envconf.number(env, "B", 1.5) == 1.5
    assert envconf.flag(env, "MISSING", True) is True and envconf.text(env, "B", "d") == "d"


def test_values_parse() -> None:
    env = {"I": " 42 ", "F": "0.25", "T": "Yes", "O": "off", "S": " x "}
    assert envconf.integer(env, "I", 0) == 42 and envconf.number(env, "F", 0.0) == 0.25
    assert envconf.flag(env, "T", False) is True and envconf.flag(env, "O", True) is False
    assert envconf.text(env, "S") == "x"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda env: envconf.integer(env, "V", 1), "V='abc' is not an integer"),
        (lambda env: envconf.number(env, "V", 1.0), "V='abc' is not a number"),
        (lambda env: envconf.flag(env, "V", True), "V='abc': expected true or false"),
    ],
)
def test_bad_values_name_the_variable(call: object, message: str) -> None:
    with pytest.raises(envconf.EnvError) as info:
        call({"V": "abc"})  # type: ignore[operator]
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_minimum_and_the_callers_error_type() -> None:
    with pytest.raises(envconf.EnvError, match="must not be negative"):
        envconf.number({"V": "-1"}, "V", 1.0, minimum=0)
    with pytest.raises(envconf.EnvError, match="must be at least 3"):
        envconf.integer({"V": "2"}, "V", 5, minimum=3)
    with pytest.raises(errors.ConfigError, match="V='x' is not a number"):
        envconf.number({"V": "x"}, "V", 1.0, error=errors.ConfigError)


def test_worker_and_notifier_settings_use_it() -> None:
    base = {"AGENTRUN_RUN_ID": "u", "AGENTRUN_DSN": "d"}
    with pytest.raises(errors.ConfigError, match="AGENTRUN_DRAIN_SECONDS='soon' is not a number"):
        worker_settings.from_env({**base, "AGENTRUN_DRAIN_SECONDS": "soon"})
    assert worker_settings.from_env({**base, "AGENTRUN_LEASE_OWNER": "false"}).lease_owner is False
    assert worker_settings.from_env(base).lease_owner is True
    op = {"AGENTRUN_DSN": "d"}
    with pytest.raises(
        operator_settings.SettingsError, match="AGENTRUN_NOTIFY_MAX_ATTEMPTS='many' is not an integer"
    ):
        operator_settings.from_env({**op, "AGENTRUN_NOTIFY_MAX_ATTEMPTS": "many"})
    with pytest.raises(operator_settings.SettingsError, match="AGENTRUN_NOTIFY_MAX_ATTEMPTS"):
        operator_settings.from_env({**op, "AGENTRUN_NOTIFY_MAX_ATTEMPTS": "0"})
    assert operator_settings.from_env(op).notify == operator_settings.NotifySettings()
    assert (
        operator_settings.from_env({**op, "AGENTRUN_NOTIFY_TIMEOUT_SECONDS": "2.5"}).notify.timeout_seconds
        == 2.5
    )


def test_the_lock_watch_limit_is_read_and_zero_turns_it_off() -> None:
    op = {"AGENTRUN_DSN": "postgresql://x/y"}
    assert operator_settings.from_env(op).reconcile.tenant_lock_wait_seconds == 10.0
    off = operator_settings.from_env({**op, "AGENTRUN_TENANT_LOCK_WAIT_SECONDS": "0"})
    assert off.reconcile.tenant_lock_wait_seconds == 0
    with pytest.raises(operator_settings.SettingsError, match="AGENTRUN_TENANT_LOCK_WAIT_SECONDS"):
        operator_settings.from_env({**op, "AGENTRUN_TENANT_LOCK_WAIT_SECONDS": "-1"})
