"""A claim agent whose answer to a call that took ops (with their intents) is lost: it asks which open
ops its epoch holds and runs them, in the same epoch, once.  A real controller commits everything; only
the answer is dropped on its way back (a client that loses it, as a cut connection would)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.helpers import ControllerProcess, wait_for
from xce.agents.agent import ClaimAgent
from xce.client import Client, Unreachable
from xce.worker.daemon import default_node_providers


class LosesAnAnswer(Client):
    """Loses the answer of the first call of ``kind`` that took ops: the controller committed it."""

    def __init__(self, *args: Any, kind: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kind = kind
        self.lost: list[dict] = []

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        out = super().request(method, path, **kwargs)
        if not self.lost and method == "POST" and path.endswith(self.kind):
            ops = (out.get("work") or {}).get("ops") if self.kind == "/reports" else out.get("ops")
            if ops:
                self.lost = ops
                raise Unreachable("the connection closed before the answer came (test)")
        return out


@pytest.fixture
def ctl(tmp_path):
    c = ControllerProcess(state_dir=str(tmp_path / "ctl")).start()
    with c.client() as api:
        r = api.post("/v1/hosts/h1/register", json={"slots": 8, "counters": {"scratch": 2**36}})
        assert r.status_code == 200, r.text
    yield c
    c.stop()


@pytest.mark.parametrize("kind", ["/work", "/reports"])
def test_ops_taken_by_a_lost_answer_are_run_once_in_the_same_epoch(ctl, tmp_path, kind):
    client = LosesAnAnswer(ctl.url, ctl.token, timeout=15.0, retry_mutations=True, kind=kind)
    work = tmp_path / "w"
    work.mkdir()
    agent = ClaimAgent(client, "node:h1", default_node_providers(str(work)), inventory_classes=False,
                       poll_wait=2.0, local_ops={"stage_in": lambda item: _copied(item)})
    t = threading.Thread(target=agent.run, daemon=True)
    t.start()
    try:
        with ctl.client() as api:
            src = tmp_path / "in.bin"
            src.write_bytes(b"x")
            r = api.post("/v1/jobs", json={"command": ["true"], "scratch": "1Mi", "stage_in": [f"{src}:in.bin"]})
            assert r.status_code == 201, r.text
            job = r.json()["id"]

            def ready() -> list[dict] | None:
                claims = [api.get(f"/v1/claims/by-id/{c['claim_id']}").json()
                          for c in api.get(f"/v1/jobs/{job}").json()["claims"] if "kind" in c]
                return claims if len(claims) == 2 and all(c["state"] == "READY" for c in claims) else None
            claims = wait_for(ready, what="both claims READY")
        assert client.lost, f"no answer to {kind} with ops was lost: the test proved nothing"
        lost = {o["op_id"] for o in client.lost}
        for c in claims:
            for op in c["ops"]:
                if op["op_id"] in lost:  # run in the epoch that took it, on its first attempt, once
                    assert (op["attempt"], op.get("epoch", agent.epoch)) == (1, agent.epoch), c["ops"]
            assert [o["result"] for o in c["ops"]].count("ok") == len({o["op_id"] for o in c["ops"]}), c["ops"]
        assert agent.epoch == 1, "recovered without a new lease"
    finally:
        agent.stop()
        t.join(30)


def _copied(item: dict):
    from xce.providers.contract import ProviderReply
    return ProviderReply(op_id=item["op_id"], ok=True, message="copied (test)")
