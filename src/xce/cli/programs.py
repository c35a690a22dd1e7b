"""The programs the native front stands for: ``xce`` itself, and LSF's commands (``xce.lsf``).

``native/xce.c`` is installed as ``xce`` and, by ``make dev``, as each LSF command (``bsub``,
``bjobs``...): it sends the warm server (``xce.cli.server``) the name it was run by, and runs
``python -m xce.cli.programs NAME ARGS...`` itself when it cannot be served ("cold").  The name is
the only thing it says about the call; which program a name runs is said here, once.  A name that
is none of LSF's commands is ``xce`` (the front may be installed as ``xce-alone``, ``xcecli``...).

``LSF`` names the entry points as ``pyproject.toml``'s console scripts do (``tests/lsf`` keeps the
two equal); they are imported by name, as ``xce.cli.main``'s command modules are, so a plain
``xce`` call loads nothing of them.  (``xce.lsf`` sits above the CLI: it reads the CLI's settings.)
"""

from __future__ import annotations

import importlib
import sys
from typing import Callable

LSF = {
    "bsub": "xce.lsf.bsub:main", "bjobs": "xce.lsf.bjobs:main", "bkill": "xce.lsf.control:bkill",
    "bstop": "xce.lsf.control:bstop", "bresume": "xce.lsf.control:bresume",
    "brequeue": "xce.lsf.control:brequeue", "bmod": "xce.lsf.control:bmod_main",
    "bhist": "xce.lsf.history:bhist_main", "bacct": "xce.lsf.history:bacct_main", "bpeek": "xce.lsf.bpeek:main",
    "bqueues": "xce.lsf.site:bqueues_main", "bhosts": "xce.lsf.site:bhosts_main", "lsid": "xce.lsf.site:lsid_main",
    "lsclusters": "xce.lsf.site:lsclusters_main", "badmin": "xce.lsf.site:badmin_main",
    "bparams": "xce.lsf.site:bparams_main", "blaunch": "xce.lsf.blaunch:main",
}

Entry = Callable[[list[str]], int]


def entry(name: str) -> Entry | None:
    """The LSF command ``name`` runs, or None for ``xce``."""
    target = LSF.get(name.rsplit("/", 1)[-1])
    if target is None:
        return None
    module, func = target.split(":")
    main: Entry = getattr(importlib.import_module(module), func)
    return main


def main(argv: list[str] | None = None) -> int:
    """``python -m xce.cli.programs NAME ARGS...``: the program ``NAME`` stands for, with ``ARGS``."""
    words = sys.argv[1:] if argv is None else argv
    name, args = (words[0], words[1:]) if words else ("xce", [])
    run = entry(name)
    if run is not None:
        sys.argv = [name, *args]
        return run(args)
    from xce.cli.main import main as xce_main

    return xce_main(args)


if __name__ == "__main__":
    sys.exit(main())
