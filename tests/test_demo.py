"""``make demo``: every command it shows is a line a shell runs as shown (pasted while its cluster is up)."""

from __future__ import annotations

import shlex

from xce import demo

ARGS = ("-J", "serve[1-3]", "--app", "serve", "--claim", "weights:ro", "-R", "span[hosts=1] select[zone==a]",
        "-o", "/tmp/out dir/serve.%I")


class Shown(demo.Demo):
    """The demo's printing, without a cluster: what ``get`` would have asked the controller is made up."""

    def get(self, *args: str):
        return {"id": 7, "queue": "default"}


def test_commands_are_shown_quoted_for_a_shell_and_scripts_as_files(tmp_path, capsys):
    d = Shown(str(tmp_path / "cluster"), str(tmp_path))
    script = d.script("train.sh", demo.TRAIN)
    assert open(script).read() == demo.TRAIN.lstrip("\n")
    d.submit(*ARGS, "--script", script)
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("$ ") and shlex.split(first[2:]) == ["xce", "submit", *ARGS, "--script", script]
