"""The process that owns state, below the API: it never imports ``xce.api``.

- ``core``        group commit, leadership (the fenced lease), snapshots, read barriers
- ``applier``     the plan applier: re-checks a scheduler plan against the newest model
- ``scheduling``  the scheduling loop; ``hosts``: host liveness; ``longpoll``: wake-ups
- ``bootstrap``   the facts that turn a config into a fresh cluster
"""
