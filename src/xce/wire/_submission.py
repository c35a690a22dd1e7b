"""``Submission``: a job as submitted, the one request type of ``POST /v1/jobs``.

Each field is one thing a submission may ask for, named as the request body names it.  Its type
says what a client may send; its ``Limit`` says what the controller accepts (lengths, patterns,
ranges), and the REST schema is made from those marks (``xce.api.schemas.request_model``), so the
two cannot drift.  Meanings are the model's (``xce.model.job_claims.request_specs``); how a command
line becomes one is ``xce.jobspec``'s.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable

NAME_PATTERN = r"^[a-z0-9][a-z0-9\-_.]{0,62}$"  # every entity's name (xce.names checks it)
# a job's name, as LSF's tools make them (snakemake's "Snakemake_rule_X___(uuid)", parsl's "parsl.htex.block-0"):
# letters, digits and punctuation no shell, path or listing reads as anything but a character; no
# blank, quote, glob, "/", "$" or "[" ("NAME[1-10]" is an array).  Claim names keep NAME_PATTERN.
JOB_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.+=:@%,()^~#-]{0,511}$"


class Limit:
    """What the controller accepts in a field: a mark in the field's ``Annotated`` type, read by the
    API to make its request schema.  Lengths are of strings and lists; ``ge``/``le`` bound numbers.
    (Plain classes here, not dataclasses: importing ``dataclasses`` costs the CLI's start-up ~18 ms.)"""

    __slots__ = ("min_length", "max_length", "pattern", "ge", "le", "description")

    def __init__(self, *, min_length: int | None = None, max_length: int | None = None, pattern: str | None = None,
                 ge: int | None = None, le: int | None = None, description: str | None = None) -> None:
        self.min_length, self.max_length, self.pattern = min_length, max_length, pattern
        self.ge, self.le, self.description = ge, le, description

    def constraints(self) -> dict[str, Any]:
        """The marks that are set, by name (pydantic's ``Field`` takes the same names)."""
        return {k: getattr(self, k) for k in self.__slots__ if getattr(self, k) is not None}


Name = Annotated[str, Limit(pattern=NAME_PATTERN, max_length=63)]
Path = Annotated[str, Limit(min_length=1, max_length=4096)]
Arg = Annotated[str, Limit(max_length=65536)]
Size = Annotated[str, Limit(min_length=1, max_length=40)]
EnvName = Annotated[str, Limit(min_length=1, max_length=1024, pattern=r"^[^=\x00]+$")]
EnvValue = Annotated[str, Limit(max_length=131072, pattern=r"^[^\x00]*$")]  # Linux's bound on one variable
MAX_SCRIPT = 1 << 20


TOKEN_SECRET = r"xce_([0-9a-f]{1,32})_[A-Za-z0-9_-]+"  # an XCE token's secret (xce.model.identity makes them)
# how a run's own secret begins (XCE_JOB_TOKEN, made by its worker; blaunch presents it): the task routes
# refuse at once a credential that is not one, rather than wait for a run's start to judge it
JOB_SECRET_PREFIX = "xcejob_"
_token_in: Callable[[str], Any] | None = None


def never_sent(name: str, value: str = "") -> bool:
    """Is an environment variable XCE's credential (``XCE_TOKEN``, ``XCE_TOKEN_FILE``..., in any case), or
    does its value hold a token's secret, whatever its name?  Such a variable never goes with a job,
    whatever a site or a submitter says: the client leaves it out of a submission and the controller
    drops it from one, so a token given to ``xce`` is never written to the log nor seen by the job, its
    host or whoever may read either."""
    upper = name.upper()
    if upper.startswith("XCE_") and "TOKEN" in upper:
        return True
    if "xce_" not in value:
        return False
    global _token_in
    if _token_in is None:  # (compiled when first needed: most environments hold no "xce_")
        import re

        _token_in = re.compile(TOKEN_SECRET).search
    return _token_in(value) is not None


class Submission:
    """A job as submitted.  Paths are taken as given: the job runs elsewhere, so a client makes them
    absolute (``xce.jobspec`` does, from the directory the user stands in).  Immutable, keyword-only,
    compared field by field; its fields are ``FIELDS``, in order, each with its default on the class."""

    command: Annotated[tuple[Arg, ...], Limit(max_length=4096, description=(
        "the program and its arguments (an argument vector, run as it is); with shell, one command line; with "
        "script, the script's arguments (none or more)"))]
    name: Annotated[str, Limit(min_length=1, max_length=600, description=(
        "a job name, or NAME[1-100] / NAME[1,3,5-9:2] for a job array"))] | None = None
    queue: Name | None = None
    project: Name | None = None
    slots: Annotated[int, Limit(ge=1, le=1_000_000)] = 1
    resreq: Annotated[str, Limit(max_length=4096)] = ""
    cwd: Path | None = None
    stdout: Path | None = None
    stderr: Path | None = None
    rerunnable: bool = False
    hold: bool = False
    claims: Annotated[tuple[Annotated[str, Limit(min_length=1, max_length=80)], ...],
                      Limit(max_length=32, description="standalone claims: NAME, NAME:rw or NAME:ro")] = ()
    scratch: Annotated[str, Limit(min_length=1, max_length=100,
                                  description="SIZE or SIZE:CLASS: a per-run scratch claim")] | None = None
    stage_in: Annotated[tuple[Path, ...], Limit(max_length=64, description="SRC (absolute) or SRC:DEST (DEST "
                                                                           "relative to $XCE_STAGE)")] = ()
    stage_out: Annotated[tuple[Path, ...], Limit(max_length=64, description="SRC:DEST (SRC relative to "
                                                                            "$XCE_STAGE, DEST absolute)")] = ()
    stage_size: Annotated[str, Limit(min_length=1, max_length=40, description=(
        "SIZE: room for the staging area on the job's first host (stage-in data and what the job leaves there "
        "for stage-out); default [claims] stage_size. xce submit sends the size of the stage-in sources"))] \
        | None = None
    app: Annotated[str, Limit(pattern=NAME_PATTERN, max_length=63, description=(
        "an application profile that declares template claims"))] | None = None
    request_id: Annotated[str, Limit(pattern=r"^[A-Za-z0-9._:-]{8,64}$", description=(
        "a client-chosen id for this submission: sent again (a retry after a failover or a lost answer), it "
        "returns the job the first one created instead of a second job"))] | None = None
    stage_class: Annotated[str, Limit(pattern=NAME_PATTERN, max_length=63, description=(
        "the staging claim's class (default [claims] stage_class); a shared-scope class stages in from URLs and "
        "remotes while the job waits, before its hosts are allocated"))] | None = None
    mem_limit: Annotated[str, Limit(min_length=1, max_length=40, description=(
        "SIZE (100Mi, 2G): the memory each host's part of the job may use (LSF's -M), enforced by the run's "
        "cgroup; without it a job's rusage[mem=] reservation is its limit"))] | None = None
    shell: Annotated[bool, Limit(description=(
        "command is one command line, run by /bin/sh -c (bsub's COMMAND; xce submit --shell)"))] = False
    script: Annotated[str, Limit(min_length=1, max_length=MAX_SCRIPT, description=(
        "the job is this script (bsub < job.sh): run with its #! interpreter, else /bin/sh; command holds its "
        "arguments"))] | None = None
    submit_dir: Annotated[str, Limit(min_length=1, max_length=4096, description=(
        "the directory the job was submitted from: where it starts when cwd is not given (where its user cannot "
        "enter it on its host, it starts in its workspace, and xce job show says so)"))] | None = None
    env: Annotated[dict[EnvName, EnvValue], Limit(max_length=4096, description=(
        "the job's environment as the submitter gives it (-env): over the execution host's clean one, without "
        "the variables the site keeps private; none: the clean one"))] | None = None
    env_all: Annotated[bool, Limit(description=(
        "env is the submitter's whole environment (-env all), which a site may refuse ([controller] "
        "job_environment = \"clean\"), rather than variables named one by one"))] = False
    dependency: Annotated[str, Limit(min_length=1, max_length=4096, description=(
        "LSF's -w: a dependency expression (done(12) && exit(\"train\", ==3) ...): the job starts only once it "
        "holds"))] | None = None
    run_limit: Annotated[str, Limit(min_length=1, max_length=20, description=(
        "LSF's -W [HH:]MM: the run is ended (the kill path) this long after it started, and ends EXIT with "
        "'run limit H:MM reached'; default the queue's run_limit"))] | None = None
    run_estimate: Annotated[str, Limit(min_length=1, max_length=20, description=(
        "LSF's -We [HH:]MM: how long the run is expected to take (for the scheduler); nothing is enforced"))] \
        | None = None
    warning_action: Annotated[str, Limit(min_length=1, max_length=20, description=(
        "LSF's -wa SIGNAL: sent once, warning_time before the run limit"))] | None = None
    warning_time: Annotated[str, Limit(min_length=1, max_length=20, description=(
        "LSF's -wt [HH:]MM: how long before the run limit the warning_action signal comes"))] | None = None
    terminate_orphan: Annotated[bool, Limit(description=(
        "LSF's -ti: end the job (EXIT) if its dependency can never hold, instead of leaving it pending"))] = False
    user_priority: Annotated[int, Limit(ge=1, le=1_000_000, description=(
        "LSF's -sp: the job's priority within its queue (higher first, after the queue's own), 1 to [controller] "
        "max_user_priority (an admin may go beyond); default half the maximum"))] | None = None
    begin_time: Annotated[float, Limit(description=(
        "LSF's -b: seconds since the epoch before which the job is not started (xce submit -b reads "
        "[[[YYYY:]MM:]DD:]hh:mm in the submitter's local time)"))] | None = None
    exclusive: Annotated[bool, Limit(description=(
        "LSF's -x: the job's hosts run nothing else while it holds them, and it starts only on hosts running "
        "nothing"))] = False
    pre_exec: Annotated[str, Limit(min_length=1, max_length=4096, description=(
        "LSF's -E: a command line run by /bin/sh on the job's first host, as the job, before its command; if it "
        "fails the run ends before the command and the job is requeued to another host"))] | None = None
    post_exec: Annotated[str, Limit(min_length=1, max_length=4096, description=(
        "LSF's -Ep: a command line run by /bin/sh after the job's command ends (not after a kill), with "
        "LSB_JOBEXIT_STAT; its failure leaves the job's state as it is and satisfies post_err()"))] | None = None
    requeue_exit: Annotated[str, Limit(min_length=1, max_length=1000, description=(
        "LSF's -Q: exit codes that send the job back to the queue: CODE ..., all [~CODE ...], EXCLUDE(CODE ...) "
        "(requeued, and not to the same host); replaces the queue's requeue_exit_values"))] | None = None
    gpu: Annotated[str, Limit(min_length=1, max_length=300, description=(
        "LSF's -gpu: num=N[:mode=shared|exclusive_process][:j_exclusive=yes|no][:gmodel=NAME][:gmem=SIZE], N GPUs "
        "on each of the job's hosts (gmem in bytes, or with a unit: 16Gi); rusage[ngpus_physical=N] in resreq "
        "asks the same"))] | None = None

    def __init__(self, **given: Any) -> None:
        unknown = set(given) - set(FIELDS)
        if unknown:
            raise TypeError(f"Submission has no field {sorted(unknown)[0]!r}")
        if "command" not in given and "script" not in given:
            raise TypeError("Submission needs a command (or a script)")
        for name in FIELDS:
            value = given.get(name, getattr(type(self), name, None))
            if isinstance(value, list):  # lists are taken for tuples (JSON has only lists)
                value = tuple(value)
            elif value is None and name == "command":  # a script without arguments
                value = ()
            object.__setattr__(self, name, value)
        if isinstance(self.mem_limit, int) and not isinstance(self.mem_limit, bool):  # -M in bytes
            object.__setattr__(self, "mem_limit", str(self.mem_limit))
        if isinstance(self.command, str) and self.shell:  # a command line: one string
            object.__setattr__(self, "command", (self.command,))
        if isinstance(self.command, str):  # a string would be sent as one argument per character
            raise TypeError("Submission.command is a sequence of arguments, not a string (a command line: shell=True)")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Submission is immutable: make another (replace)")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Submission) and self.to_body() == other.to_body()

    def __hash__(self) -> int:
        return hash(tuple(frozenset(v.items()) if isinstance(v := getattr(self, name), dict) else v for name in FIELDS))

    def __repr__(self) -> str:
        return "Submission(" + ", ".join(f"{k}={v!r}" for k, v in self.to_body().items()) + ")"

    def to_body(self) -> dict[str, Any]:
        """The JSON body of ``POST /v1/jobs``: every field, lists for tuples, unset optional ones left out
        (and the new flags when false: an older controller takes the body of a submission that uses none)."""
        body: dict[str, Any] = {}
        for name in FIELDS:
            value = getattr(self, name)
            if value is not None and not (name in _LEFT_OUT_WHEN_FALSE and value is False):
                body[name] = list(value) if isinstance(value, tuple) else value
        return body

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> Submission:
        """A body as ``to_body`` makes it (or the API has validated it); an unknown key is a ``TypeError``."""
        return cls(**body)

    def replace(self, **changes: Any) -> Submission:
        return Submission(**{**{name: getattr(self, name) for name in FIELDS}, **changes})

    def with_request_id(self, request_id: str) -> Submission:
        return self.replace(request_id=request_id)


FIELDS: tuple[str, ...] = tuple(Submission.__annotations__)  # in order
_LEFT_OUT_WHEN_FALSE = frozenset({"shell", "env_all", "exclusive"})
