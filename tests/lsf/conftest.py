"""What the LSF commands' tests share: a real cluster of two hosts, the site's LSF_ENVDIR as ``xce up``
writes it, and the commands themselves, on PATH, as the console scripts pyproject.toml declares."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

import pytest

from tests.helpers import Cluster, kill_jobs_of
from xce.lsfsite import envdir_of, write_envdir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def console_scripts() -> dict[str, str]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        scripts = tomllib.load(fh)["project"]["scripts"]
    return {name: target for name, target in scripts.items() if target.startswith("xce.lsf.")}


def write_commands(bin_dir: str) -> None:
    """Each LSF command as pip would install it (its entry point run by this interpreter), for this
    tree's code: the client packages find them on PATH by name."""
    os.makedirs(bin_dir, exist_ok=True)
    for name, target in console_scripts().items():
        module, func = target.split(":")
        path = os.path.join(bin_dir, name)
        with open(path, "w") as fh:
            fh.write(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {os.path.join(ROOT, 'src')!r})\n"
                     f"from {module} import {func}\nsys.exit({func}())\n")
        os.chmod(path, 0o755)


class LsfSite:
    """A cluster, its LSF_ENVDIR and the environment the LSF commands (and the tools) run in."""

    def __init__(self, root: str, hosts: int = 2, slots: int = 4) -> None:
        self.root = root
        self.cluster = Cluster(root).start()
        for i in range(1, hosts + 1):
            self.cluster.add_worker(f"host{i}", slots=slots)
        self.envdir = envdir_of(root)
        write_envdir(self.envdir, root)
        self.bin = os.path.join(root, "bin")
        write_commands(self.bin)
        self.env = {**self.cluster.env, "LSF_ENVDIR": self.envdir,
                    "PATH": f"{self.bin}:{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}"}

    def run(self, *argv: str, input: str | None = None, cwd: str | None = None, timeout: float = 60,
            check: bool = False) -> subprocess.CompletedProcess:
        r = subprocess.run(list(argv), env={**os.environ, **self.env}, input=input, capture_output=True, text=True,
                           cwd=cwd or self.root, timeout=timeout)
        if check:
            assert r.returncode == 0, f"{' '.join(argv)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    def stop(self) -> None:
        for w in self.cluster.workers.values():
            kill_jobs_of(w.work_dir)
        self.cluster.stop()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    s = LsfSite(str(tmp_path_factory.mktemp("lsf")))
    yield s
    s.stop()
