def test_submit_and_show(controller):
    with controller.client() as c:
        r = c.post("/v1/jobs", json={"command": ["sleep", "1"], "name": "j1"})
        assert r.status_code == 201, r.text
        job = r.json()
        assert job["state"] == "PEND" and job["name"] == "j1"
        # the workspace is every job's first template claim; nothing else was asked for
        assert [(c["name"], c["form"], c["state"]) for c in job["claims"]] == [("workspace", "template", "PENDING")]
        shown = c.get(f"/v1/jobs/{job['id']}").json()
        # the pending reason is the scheduler's latest word and may change between the two calls
        assert shown.pop("pending_reason") and job.pop("pending_reason")
        assert shown == job
