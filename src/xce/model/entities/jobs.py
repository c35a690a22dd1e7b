"""What a job is: its state enum and the ``Job`` record.  Plain data.

How a job changes (``TRANSITIONS``, ``_set_state``, the folds) and what requests may do to one is
``xce.model.jobs``; how its claims meet it is ``xce.model.job_claims``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class JobState(enum.StrEnum):
    PEND = "PEND"
    PSUSP = "PSUSP"
    RUN = "RUN"
    USUSP = "USUSP"  # its processes frozen by xce stop (LSF's bstop), until xce resume
    STAGE_OUT = "STAGE_OUT"  # the process ended; the staging claim copies out, then DONE or EXIT
    DONE = "DONE"
    EXIT = "EXIT"


J = JobState
ACTIVE = frozenset({J.RUN, J.USUSP, J.STAGE_OUT})  # holding its hosts after it started
RUNNING = frozenset({J.RUN, J.USUSP})  # its process is there (suspended or not)


# slots: a Job has more fields than CPython shares one key table for (30), so each instance's
# __dict__ was a table of its own: 1.3 KiB of a pending job's 2.7 KiB, for every live job
@dataclass(slots=True)
class Job:
    id: int
    name: str
    user: str
    project: str
    queue: str
    command: list[str]
    submit_time: float
    state: JobState = JobState.PEND
    slots: int = 1
    resreq: str = ""
    cwd: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    rerunnable: bool = False
    pending_reason: str | None = None
    exit_code: int | None = None
    hosts: list[str] = field(default_factory=list)
    array_parent: int | None = None
    array_index: int | None = None
    run: int = 0  # attempts so far; the current allocation's number
    alloc_slots: dict[str, int] = field(default_factory=dict)
    alloc_counters: dict[str, dict[str, float]] = field(default_factory=dict)
    alloc_cluster: dict[str, float] = field(default_factory=dict)  # cluster-scope counters held
    start_time: float | None = None
    end_time: float | None = None
    signal: int | None = None
    exit_reason: str | None = None
    pid: int | None = None
    workspace: str | None = None
    kill_requested: bool = False
    kill_requeue: bool = False
    kill_by: str = ""  # who asked for the kill (for the exit reason)
    kill_preemptor: int | None = None  # the run is being ended by preemption, for this pending job
    kill_grace: float | None = None  # seconds from SIGTERM to SIGKILL, chosen when the kill was asked
    order_seq: int = 0  # orders given to the current run's processes (kill, signals, stop, resume)
    signal_orders: list[list[int]] = field(default_factory=list)  # [seq, signal] (xce kill -s), [seq, signal, task] (to a task), newest last
    mem_limit: int | None = None  # -M: bytes each host's part of a run may use
    shell: bool = False  # command is one command line for /bin/sh -c
    script: str | None = None  # the job is this script (bsub < job.sh); command its arguments
    submit_dir: str | None = None  # where the job starts when cwd is not given (else its workspace)
    env: dict[str, str] | None = None  # the submitter's variables that go with the job (until it finishes)
    run_note: str = ""  # what the worker noted starting the current run (a submission directory it could not enter)
    usage: dict[str, Any] | None = None  # what the last run used: max_rss_bytes, cpu_user_s, cpu_sys_s
    # claims (see xce.model.job_claims)
    claim_refs: list[dict[str, Any]] = field(default_factory=list)  # standalone: {claim_id, name, mode}
    templates: list[dict[str, Any]] = field(default_factory=list)  # made for every run
    app: str | None = None
    run_claims: list[int] = field(default_factory=list)  # the current run's template claims
    early_claim: int | None = None  # a shared staging claim made ahead for the next run (staged before allocation)
    alloc_time: float | None = None  # when the current run's hosts were allocated (held from then on)
    run_attachments: list[list[int]] = field(default_factory=list)  # its attachments: [claim_id, attachment_id]
    publish: str = ""  # how the run's claims were published in its sandbox: "bind", "symlink" (no root)
    process_exit: dict[str, Any] | None = None  # how the process ended, while the stage-out runs
    history: list[dict[str, Any]] = field(default_factory=list)  # {state, time, reason}: every transition
    request_id: str | None = None  # the submission's client-chosen id (model.job_requests finds it)
    dependency: str | None = None  # -w: the expression as submitted (xce.depend)
    dependency_tree: list[Any] | None = None  # the same, its targets resolved to job ids (xce.model.dependencies)
    terminate_orphan: bool = False  # -ti: a dependency that can never hold ends the job
    array_limit: int | None = None  # NAME[1-1000]%50: at most this many of its array's elements hold hosts at once
    run_limit: float | None = None  # -W (or its queue's run_limit): seconds a run may last from its start
    run_estimate: float | None = None  # -We: seconds it is expected to take
    warn_signal: int | None = None  # -wa: sent once, warn_time seconds before the run limit
    warn_time: float | None = None  # -wt
    limit_grace: float | None = None  # SIGTERM to SIGKILL when the run limit ends a run (its queue's grace)
    user_priority: int = 0  # -sp: its order within its queue, higher first (xce mod changes it)
    begin_time: float | None = None  # -b: not started before (seconds since the epoch)
    exclusive: bool = False  # -x: its hosts run nothing else while it holds them
    requeue_exit: str | None = None  # -Q or its queue's requeue_exit_values: exit codes that requeue it
    max_requeue: int | None = None  # its queue's max_job_requeue: requeues by exit value before it ends EXIT
    requeues: int = 0  # runs requeued by their exit value so far
    avoid_hosts: list[str] = field(default_factory=list)  # hosts its next runs never go to (-Q EXCLUDE(), -E)
    pre_exec: str | None = None  # -E: run before its command, as it, on its first host
    post_exec: str | None = None  # -Ep: run after its command ends
    pre_exec_failures: int = 0  # runs whose -E failed (requeued elsewhere until MAX_PREEXEC_RETRY)
    post_exec_exit: int | None = None  # the last run's -Ep exit code (None: it did not run)
    gpu: dict[str, Any] | None = None  # GPUs on each host: xce.jobspec_gpu.GpuRequest.as_json (None: none)
    # host -> the GPU ids of the current run, or of the last one once it ended (who holds a GPU now: Host.held_gpus)
    run_gpus: dict[str, list[int]] = field(default_factory=dict)
    rendezvous: str = ""  # the current run's ADDR:PORT on its first host (XCE_RDZV_HOST, XCE_RDZV_PORT)
    task_key: str = ""  # sha256 of the current run's secret, which its blaunch presents (xce.model.tasks)
    # the current run's tasks on its hosts (blaunch): {task, host, command, cwd, keep_going, ended,
    # exit_code, signal, reason}, in launch order (task i at index i - 1)
    tasks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def array_busy(self) -> bool:
        """An element of a limited array that holds hosts now (allocated, running or staging out)."""
        return self.array_limit is not None and not self.finished and (bool(self.alloc_slots) or self.started)

    def __post_init__(self) -> None:
        if type(self.state) is not JobState:  # read back from JSON (a snapshot, an archived document)
            self.state = JobState(self.state)

    @property
    def allocated(self) -> bool:
        """Resources are reserved for the current run (PEND while dispatching, or RUN)."""
        return bool(self.alloc_slots)

    @property
    def finished(self) -> bool:
        return self.state in (JobState.DONE, JobState.EXIT)

    @property
    def started(self) -> bool:
        """Its process was started for this run (RUN, or STAGE_OUT once it ended)."""
        return self.state in ACTIVE

    @property
    def display_id(self) -> str:
        return f"{self.array_parent}[{self.array_index}]" if self.array_parent is not None else str(self.id)
