"""The snapshot commands' parsing: what needs no controller to refuse, and the states they offer."""

from __future__ import annotations

from tests.helpers import cli

NOWHERE = {"XCE_URL": "http://127.0.0.1:9", "XCE_TOKEN": "x", "XCE_CONFIG": ""}


def test_the_cli_offers_the_models_states():
    from xce.cli.commands_claims import SNAPSHOT_STATES
    from xce.model.snapshots import SnapshotState

    assert set(SNAPSHOT_STATES) == {s.value for s in SnapshotState}


def test_claim_create_needs_class_size_and_access_unless_it_is_a_clone():
    r = cli(NOWHERE, "claim", "create", "x", "--size", "1Gi")
    assert r.returncode == 2 and "--class, --access required (unless --from-snapshot or --from-claim)" in r.stderr
    r = cli(NOWHERE, "claim", "create", "x", "--from-snapshot", "s", "--from-claim", "c")
    assert r.returncode == 2 and "not allowed with argument" in r.stderr
    r = cli(NOWHERE, "claim", "create", "x", "--from-snapshot", "s")  # well-formed: the controller is not there
    assert r.returncode == 1


def test_snapshot_commands_parse():
    for args in (("claim", "snapshot", "ckpt"), ("snapshot", "delete"), ("snapshot", "frobnicate")):
        assert cli(NOWHERE, *args).returncode == 2, args
    assert cli(NOWHERE, "snapshot", "list", "--state", "ready").returncode == 1  # parsed; nothing listens
