"""AppConfig: the validated settings a worker runs an app with."""
from __future__ import annotations

from datetime import timedelta

import pytest

import streamkit as sk
from streamkit.core.app_config import AppConfig
from streamkit.errors import ConfigError


@pytest.mark.parametrize("changes, named", [
    ({"app_id": "has space"}, "app id"),
    ({"processing_guarantee": "at_most_once"}, "processing_guarantee"),
    ({"commit_interval": timedelta(0)}, "commit_interval"),
    ({"commit_interval": 5}, "commit_interval"),
    ({"deserialization_error_handler": "ignore"}, "deserialization_error_handler"),
    ({"processing_error_handler": "retry"}, "processing_error_handler"),
    ({"store_backend": "lmdb"}, "store_backend"),
    ({"cache_max_bytes": -1}, "cache_max_bytes"),
    ({"num_standby_replicas": -1}, "num_standby_replicas"),
    ({"max_task_idle": timedelta(seconds=-1)}, "max_task_idle"),
    ({"close_idle_windows_after_ms": 0}, "close_idle_windows_after"),
])
def test_a_bad_setting_raises_config_error_naming_it(changes, named):
    settings = {"app_id": "ok", **changes}
    with pytest.raises(ConfigError, match=named):
        AppConfig(**settings)


def test_the_commit_interval_defaults_by_guarantee_unless_set():
    assert AppConfig("a").effective_commit_interval == timedelta(seconds=1)
    assert AppConfig("a", processing_guarantee="exactly_once").effective_commit_interval == timedelta(
        milliseconds=100)
    assert AppConfig("a", processing_guarantee="exactly_once",
                     commit_interval=timedelta(seconds=3)).effective_commit_interval == timedelta(seconds=3)


def test_overrides_replace_only_what_is_given_and_are_validated():
    config = AppConfig("a", state_dir="/s", num_standby_replicas=1)
    assert config.with_overrides() is config
    changed = config.with_overrides(guarantee="exactly_once", standby_replicas=0)
    assert (changed.processing_guarantee, changed.num_standby_replicas, changed.state_dir) == ("exactly_once", 0, "/s")
    assert config.processing_guarantee == "at_least_once"  # frozen: the original is unchanged
    with pytest.raises(ConfigError, match="processing_guarantee"):
        config.with_overrides(guarantee="maybe")


def test_an_app_validates_its_settings_and_shows_them_read_only():
    app = sk.App("shop", processing_guarantee="exactly_once", close_idle_windows_after=timedelta(seconds=2),
                 deserialization_error_handler="dead_letter")
    assert app.config.close_idle_windows_after_ms == 2000
    assert app.processing_guarantee == "exactly_once" and app.config.uses_dead_letters
    assert app.effective_commit_interval() == timedelta(milliseconds=100)
    assert app.effective_commit_interval("at_least_once") == timedelta(seconds=1)
    with pytest.raises(AttributeError):
        app.caching = False  # settings are fixed once the app exists
    with pytest.raises(ConfigError, match="close_idle_windows_after"):
        sk.App("shop", close_idle_windows_after=timedelta(0))
