"""A leader brings the model in line with the configuration: facts for differences only, decided on a
copy of the catalog (never the live model, and never a copy of every job)."""

from __future__ import annotations

from tests.controller.test_applier import CONFIG, World
from xce.config import parse_config
from xce.controller.bootstrap import bootstrap_facts
from xce.model.facts import TokenIssued


def test_only_what_changed_in_the_config_becomes_facts_and_the_live_model_is_untouched():
    w = World()
    first, secret = bootstrap_facts(w.model, CONFIG, w.tick(), need_admin_token=True)
    w.commit(first)
    assert secret and any(isinstance(f, TokenIssued) for f in first)
    jobs = [w.submit() for _ in range(3)]
    again, secret = bootstrap_facts(w.model, CONFIG, w.tick(), need_admin_token=False)
    assert again == [] and secret is None, "the same config adds nothing"

    changed = parse_config(CONFIG_TEXT_WITH_A_NEW_QUEUE_AND_USER)
    before = (dict(w.model.queues), dict(w.model.users), w.model.position)
    facts, _ = bootstrap_facts(w.model, changed, w.tick(), need_admin_token=False)
    assert sorted(type(f).__name__ for f in facts) == ["QueueDefined", "UserDefined"]
    assert (dict(w.model.queues), dict(w.model.users), w.model.position) == before, "decided on a copy"
    w.commit(facts)
    assert "urgent" in w.model.queues and w.model.users["bob"].projects == ["default"]
    assert all(w.model.jobs[j.id] is j for j in jobs)


CONFIG_TEXT_WITH_A_NEW_QUEUE_AND_USER = """
[[users]]
name = "admin"
role = "admin"
projects = ["default"]
[[users]]
name = "bob"
role = "user"
projects = ["default"]
[[queues]]
name = "default"
[[queues]]
name = "urgent"
priority = 60
[[projects]]
name = "default"
"""
