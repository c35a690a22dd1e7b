"""Fuzz every operation in /openapi.json with schemathesis against a real controller: no 5xx."""

import os
import shutil
import subprocess
import sys


def test_no_server_errors_under_schema_fuzzing(ctl, tmp_path):
    st = shutil.which("schemathesis", path=os.path.dirname(sys.executable)) or shutil.which("schemathesis")
    assert st, "schemathesis must be installed (test extra)"
    proc = subprocess.run(
        [st, "run", ctl.url + "/openapi.json", "-H", f"Authorization: Bearer {ctl.token}",
         "--checks", "not_a_server_error", "--max-examples", "40", "--seed", "1",
         # the workers' long-poll holds a request open by design; tests/integration cover it
         "--exclude-path", "/v1/hosts/{host}/work"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "passed" in proc.stdout
    with ctl.client() as c:
        assert c.get("/healthz").json()["ok"]
