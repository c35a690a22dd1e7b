import pytest

from tests.helpers import ControllerProcess


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    c = ControllerProcess(state_dir=str(tmp_path_factory.mktemp("api") / "ctl")).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def users(ctl):
    """Two plain users with their own tokens: {'alice': token, 'bob': token}."""
    tokens = {}
    with ctl.client() as c:
        for name in ("alice", "bob"):
            r = c.post("/v1/users", json={"name": name, "role": "user", "projects": ["default"]})
            assert r.status_code == 201, r.text
            r = c.post("/v1/tokens", json={"user": name})
            assert r.status_code == 201, r.text
            tokens[name] = r.json()["token"]
    return tokens
