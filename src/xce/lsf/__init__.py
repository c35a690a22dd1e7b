"""LSF's commands, so the tools that drive LSF drive XCE unchanged (issue 31).

General layout: each command is a module with a ``main`` (a console script beside ``xce``):
``bsub`` (submission: the job-spec parser's bsub column, ``xce.jobspec.bsub_values``), ``bjobs``,
``control`` (``bkill``, ``bstop``, ``bresume``, ``brequeue``, ``bmod``), ``history`` (``bhist``,
``bacct``), ``bpeek``, and ``site`` (``bqueues``, ``bhosts``, ``lsid``, ``lsclusters``,
``badmin showconf``, ``bparams``).  ``jobfields`` is the one place a job becomes LSF's words (its
fields, their names and the table, JSON and long formats); ``_base`` is what every command shares:
the controller, from the same settings ``xce`` reads (``XCE_CONFIG``, ``XCE_URL``, ``XCE_TOKEN``),
job ids, and failures as LSF reports them (``prog: message``, exit 255).
"""
