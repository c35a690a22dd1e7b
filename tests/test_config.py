"""The controller's configuration: a queue's and an application profile's default staging class.

Both tables are checked by type with pydantic as the file is read, and the class they name must exist:
a mistake is refused when the controller starts, naming the table, not at some user's submission."""

from __future__ import annotations

import pytest

from xce.config import DEFAULT_CONFIG, ConfigError, parse_config

QUEUE = '[[queues]]\nname = "default"\npriority = 30\ndescription = "default queue"'


def with_queue(extra: str) -> str:
    assert QUEUE in DEFAULT_CONFIG
    return DEFAULT_CONFIG.replace(QUEUE, QUEUE + "\n" + extra)


def with_app(extra: str) -> str:
    return DEFAULT_CONFIG + f'\n[[apps]]\nname = "train"\n{extra}\n'


def test_queues_and_profiles_name_their_default_staging_class():
    config = parse_config(with_queue('stage_class = "simfs"') + "\n" + with_app('stage_class = "stage"')
                          .removeprefix(DEFAULT_CONFIG))
    assert [q.stage_class for q in config.queues] == ["simfs"]
    assert config.app("train").stage_class == "stage" and config.app("serve").stage_class is None


@pytest.mark.parametrize("text, says", [
    (with_queue('stage_class = 5'), "[[queues]] #1: stage_class: Input should be a valid string"),
    (with_queue('stage_class = ["simfs"]'), "stage_class: Input should be a valid string"),
    (with_queue('stage_class = "nope"'), "queue 'default': stage_class 'nope' is no claim class (classes: scratch, "
                                         "simfs, stage)"),
    (with_queue('priority = "high"'.replace("priority", "stage_klass")), "unknown key(s) stage_klass"),
    (with_app('stage_class = "nope"'), "application profile 'train': stage_class 'nope' is no claim class"),
    (with_app('stage_class = false'), "[[apps]] #2: stage_class: Input should be a valid string"),
    (with_app('description = 3'), "description: Input should be a valid string"),
])
def test_a_bad_default_staging_class_is_refused_naming_the_table(text, says):
    with pytest.raises(ConfigError) as e:
        parse_config(text)
    assert says in e.value.message


def test_trusted_proxies_are_addresses_or_networks_and_none_by_default():
    assert parse_config(DEFAULT_CONFIG).controller.trusted_proxies == ()
    text = DEFAULT_CONFIG.replace("[controller]\n", '[controller]\ntrusted_proxies = ["10.0.0.5", "192.168.7.0/24"]\n',
                                  1)
    assert parse_config(text).controller.trusted_proxies == ("10.0.0.5/32", "192.168.7.0/24")
    for bad in ('"10.0.0.5"', '["*"]', '["proxy.example"]', "[5]"):
        with pytest.raises(ConfigError, match="trusted_proxies"):
            parse_config(DEFAULT_CONFIG.replace("[controller]\n", f"[controller]\ntrusted_proxies = {bad}\n", 1))


def test_the_launcher_lease_is_30s_by_default_and_at_least_a_second():
    assert parse_config(DEFAULT_CONFIG).controller.launcher_lease == 30.0
    with pytest.raises(ConfigError, match="1 <= launcher_lease <= 86400"):
        parse_config(DEFAULT_CONFIG.replace("launcher_lease = 30.0", "launcher_lease = 0.5"))
