"""The process that owns state, below the API: it never imports ``xce.api``.

- ``core``        ``Controller``: the parts below put together, the one object routes talk to
- ``commit``      group commit, decide/fold/append, the read barrier; ``term``: may this controller act
- ``leadership``  the fenced lease, the survey of the store, following, recovery, a term's bootstrap
- ``model_snapshot``  the model written to the store and loaded back; ``archive``: archive and audit rows
- ``listeners``   who hears of commits, leadership and shutdown; ``observed``: storage readings
- ``applier``     the plan applier: re-checks a scheduler plan against the newest model
- ``scheduling``  the scheduling loop (``view``: the scheduler's input, built from the model)
- ``hosts``: host liveness; ``longpoll``: wake-ups; ``history``: retirement and the archive's reads
- ``bootstrap``   the facts that turn a config into a fresh cluster
"""
