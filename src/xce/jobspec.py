"""The job-spec parser: a submission's arguments, as a front door gathers them, into one ``Submission``.

Every way of submitting a job means the same through this module: ``xce submit`` today, LSF's
``bsub`` options and ``#BSUB`` script directives next (issue 31).  A front door only gathers the
argument vector, the directory the user stands in and what the submission needs of the host
(the files it names; the controller's remote names, asked only when a word could be one); what
each option means, and how it becomes a field of ``xce.wire.Submission``, is said once, here:

- ``OPTIONS`` is the table: one ``Option`` per submission option, with its spellings, its help and
  the ``Submission`` field it sets.  ``add_options`` turns the table into an ``argparse`` parser's
  arguments (the ``xce submit`` command's, in ``xce.cli.commands_jobs``).  ``bsub`` is a second spelling
  column (``Option.bsub``: ``-J``, ``-cwd``, ``-env``...) read by ``bsub_parser``; ``bsub_values``
  reads a bsub command line and a script's ``#BSUB`` lines (split like shell words; the command
  line's options win) into the same fields, with LSF's meanings where they differ (a command line
  run by the shell, LSF's sizes: ``submission(lsf_unit=...)``; ``BSUB_PLANNED``: the options whose
  feature is not there yet, parsed and refused, never ignored).
- ``submission`` reads a parsed namespace into a ``Submission`` in the table's order, each option
  through its ``resolve`` step: paths made absolute from the submission directory (the job runs
  elsewhere), stage-in sources measured, a resource requirement checked with a caret under the
  column at fault.  Anything wrong is a ``JobSpecError``, which the front door reports as bad
  usage (``xce``: exit 2).

Adding an option: a field in ``Submission``, a row here, its meaning in the model, a test
(``docs/architecture.md``, "Adding a submit option").

Stdlib only, below the model and the API (``pyproject.toml``), so anything that takes a
submission's arguments may parse them with it.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any, Callable, Collection, Mapping

from xce.wire import MAX_SCRIPT, Submission, never_sent


class JobSpecError(ValueError):
    """A submission's arguments mean nothing a controller would take (an empty path, an -R that does
    not parse): bad usage, found before anything is sent.  ``message`` is one line for people (the
    -R one adds the text and a caret)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def positive_int(text: str) -> int:
    """An argparse type: a positive integer, or a usage error that says what was given."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


class Site:
    """What resolving an option may need beyond its own value: the submission directory, the values
    of the options before it, and the controller's remote names (asked once, and only if a word
    could name one: ``remote_names`` is called lazily)."""

    def __init__(self, cwd: str, remote_names: Callable[[], Collection[str]],
                 environ: Mapping[str, str] | None = None, stdin: Callable[[], str] | None = None,
                 lsf_unit: str | None = None) -> None:
        self.cwd = cwd
        # LSF_UNIT_FOR_LIMITS on the bsub path: -M and rusage[mem=] sizes read as LSF reads them (bare
        # numbers in this unit, KB MB GB TB powers of 1024) and sent as bytes; None (xce submit): XCE's
        # sizes (bare numbers are bytes; K M G T powers of 1000, Ki Mi Gi Ti of 1024)
        self.lsf_unit = lsf_unit
        self.environ: Mapping[str, str] = environ if environ is not None else {}  # the submitter's
        self.stdin = stdin  # reads the script from standard input (``--script -``); None: there is none
        self.fields: dict[str, Any] = {}
        self.local_sources: list[str] = []  # the stage-in sources that are paths here (stage_size measures them)
        self._remote_names = remote_names
        self._remotes: Collection[str] | None = None

    def far(self, text: str) -> bool:
        """Is a stage location a URL or one of the site's remotes (``NAME:path``), rather than a local
        path?  A ``NAME:`` prefix is a remote only if the site names one so; otherwise it is a
        relative path and its DEST, as before (``./NAME`` is always a path)."""
        if re.match(r"^[A-Za-z][A-Za-z0-9+.\-]{0,15}://", text):
            return True
        m = re.match(r"^([a-z0-9][a-z0-9\-_.]{0,62}):", text)
        if m is None:
            return False
        if self._remotes is None:
            self._remotes = self._remote_names()
        return m.group(1) in self._remotes


Resolve = Callable[[Any, Site], Any]


class Option:
    """One submission option: the ``Submission`` field it sets, how ``xce submit`` spells it, and how
    its parsed value becomes the field's (``resolve``; None: as parsed).  ``kind`` is argparse's:
    ``value`` (one), ``flag`` (present or not), ``append`` (repeatable), ``command`` (the rest).
    (A plain class: importing ``dataclasses`` costs the CLI's start-up ~18 ms.)"""

    __slots__ = ("field", "flags", "help", "kind", "metavar", "type", "default", "resolve", "bsub")

    def __init__(self, field: str, flags: tuple[str, ...], help: str, *, kind: str = "value",
                 metavar: str | None = None, type: Callable[[str], Any] | None = None, default: Any = None,
                 resolve: Resolve | None = None, bsub: tuple[str, ...] = ()) -> None:
        self.field, self.flags, self.help, self.kind = field, flags, help, kind
        self.metavar, self.type, self.default, self.resolve = metavar, type, default, resolve
        self.bsub = bsub  # how LSF's bsub spells it (-J, -cwd); () if bsub has no such option


# ---------------------------------------------------------------- resolve steps


def _job_path(field: str) -> Resolve:
    """--cwd from where the user stands now; -o/-e from the job's working directory (--cwd, else
    here: the workspace is gone after the job), as bsub takes them."""
    def resolve(value: str | None, site: Site) -> str | None:
        if value is None:
            return None
        if not value:
            raise JobSpecError(f"--{field} needs a path")
        return os.path.join(site.fields.get("cwd") or site.cwd, value)
    return resolve


def _if_given(value: str | None, site: Site) -> str | None:
    """An empty value means the option was not given (``--scratch ""``)."""
    return value or None


def _stage_in(items: list[str], site: Site) -> tuple[str, ...]:
    """Paths are read on the job's host: made absolute from here, and refused here when there is no
    such file (a typo found at submission, not minutes later as the job's EXIT; a file this user may
    not read is left to the stage-in, which says so).  ``NAME:path`` with no remote NAME is a path
    too; when there is no such file either, the refusal names both.  A URL or a remote is the
    controller's to resolve for the job's project."""
    out = []
    for text in items:
        if site.far(text):
            out.append(text)
            continue
        src, sep, dest = text.partition(":")
        path = os.path.join(site.cwd, src)
        try:
            os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            if sep and re.match(r"^[a-z0-9][a-z0-9\-_.]{0,62}$", src):
                raise JobSpecError(f"--stage-in {text}: {src} is not a remote (xce transfers list) nor a file "
                                   f"here ({path})") from None
            raise JobSpecError(f"--stage-in {text}: no such file or directory: {path}") from None
        except OSError:
            pass  # (not readable by this user: the stage-in itself says so, as a permanent error)
        site.local_sources.append(path)
        out.append(path + (f":{dest}" if sep else ""))
    return tuple(out)


def _stage_out(items: list[str], site: Site) -> tuple[str, ...]:
    """Destinations default to here."""
    out = []
    for text in items:
        src, _, dest = text.partition(":")
        if dest and site.far(dest):
            out.append(text)
        else:
            out.append(f"{src}:{os.path.join(site.cwd, dest or os.path.basename(src))}")
    return tuple(out)


def _stage_size(value: str | None, site: Site) -> str | None:
    """Given (checked, as ``_checked``), or what the stage-in sources hold when every one is a path here
    (what URLs and remotes hold is not measured here: give --stage-size, else [claims] stage_size)."""
    if value:
        return _checked(_size("--stage-size"))(value, site)
    if site.local_sources and len(site.local_sources) == len(site.fields.get("stage_in") or ()):
        return str(stage_bytes(site.local_sources))
    return None


def stage_bytes(sources: list[str]) -> int:
    """What the stage-in sources hold (the room their copy takes), rounded up to a whole MiB; what
    cannot be read from here counts nothing (the stage-in itself will say why)."""
    total = 0
    for src in sources:
        try:
            st = os.lstat(src)
        except OSError:
            continue
        total += st.st_size
        if os.path.isdir(src):
            for top, dirs, files in os.walk(src):
                for name in dirs + files:
                    try:
                        total += os.lstat(os.path.join(top, name)).st_size
                    except OSError:
                        pass
    mib = 1 << 20
    return max(1, -(-total // mib)) * mib


def _dependency(value: str | None, site: Site) -> str | None:
    """Checked here, as -R is, so a typo is shown with a caret before anything is sent."""
    if value is None:
        return None
    from xce.depend import DependError, parse  # (only when given)

    try:
        parse(value)
    except DependError as e:
        raise JobSpecError(f"bad dependency expression (-w): {e.reason} at column {e.position + 1}\n"
                           f"  {e.text}\n  {' ' * e.position}^") from None
    return value


def _begin_time(value: str | None, site: Site) -> float | None:
    """-b in the submitter's local time, as seconds since the epoch (the controller has no time zone of
    the user's)."""
    if value is None:
        return None
    import time

    from xce.units import parse_begin_time

    try:
        return parse_begin_time(value, time.time())
    except ValueError as e:
        raise JobSpecError(str(e)) from None


def _requeue_exit(value: str | None, site: Site) -> str | None:
    """-Q checked here, as -R is; sent as given."""
    if value is None:
        return None
    from xce.exitvalues import ExitValuesError, parse

    try:
        parse(value)
    except ExitValuesError as e:
        raise JobSpecError(f"-Q: {e}") from None
    return value


def _resreq(value: str | list[str] | None, site: Site) -> str:
    """One -R, or several merged as LSF merges them (``resreq.merge_resreqs``); checked here, so a typo is
    shown with a caret under its column before anything is sent.  On the bsub path, rusage[mem=] is in
    ``LSF_UNIT_FOR_LIMITS`` and sent in bytes."""
    given = [value] if isinstance(value, str) else [v for v in value or () if v]
    if not any(given):
        return ""
    from xce.resreq import ResReqError, convert_rusage, merge_resreqs  # (only when given: a plain submit stays light)

    try:
        if site.lsf_unit is not None:
            given = [convert_rusage(t, MEMORY_COUNTERS, lambda amount: str(_lsf_bytes(amount, site, "rusage[mem]")))
                     for t in given]
        return merge_resreqs(given)
    except ResReqError as e:
        raise JobSpecError(f"bad resource requirement (-R): {e.reason} at column {e.position + 1}\n"
                           f"  {e.text}\n  {' ' * e.position}^") from None


MEMORY_COUNTERS = frozenset({"mem"})  # the rusage[] counters LSF_UNIT_FOR_LIMITS applies to


def _lsf_bytes(text: str, site: Site, what: str) -> int:
    from xce.errors import InvalidRequest
    from xce.units import parse_lsf_size

    try:
        return parse_lsf_size(text, site.lsf_unit or "MB", what)
    except InvalidRequest as e:
        raise JobSpecError(e.message) from None


def _mem_limit(value: str | None, site: Site) -> str | None:
    """-M: XCE's sizes as given (the controller reads them: bare numbers are bytes; checked here first,
    as ``_checked``), or on the bsub path LSF's, in bytes."""
    if value is None:
        return None
    if site.lsf_unit is None:
        from xce.units import parse_mem_limit

        return _checked(parse_mem_limit)(value, site)
    return str(_lsf_bytes(value, site, "memory limit (-M)"))


def _gpu(value: str | None, site: Site) -> str | None:
    """-gpu as one ``GpuRequest`` (``xce.jobspec_gpu``), sent spelled out with gmem in bytes: XCE's sizes,
    or on the bsub path LSF's (a bare number in ``LSF_UNIT_FOR_LIMITS``)."""
    if value is None:
        return None
    from xce.jobspec_gpu import GPU_RUSAGE, GpuRequestError, bytes_of, job_request, parse_gpu

    def size(text: str) -> int:
        return _lsf_bytes(text, site, "-gpu gmem") if site.lsf_unit is not None else bytes_of(text)

    try:
        if GPU_RUSAGE in site.fields.get("resreq", ""):
            from xce.resreq import parse_resreq

            job_request(value, dict(parse_resreq(site.fields["resreq"]).rusage))  # both given: which one?
        return parse_gpu(value, size).text()
    except GpuRequestError as e:
        raise JobSpecError(e.message) from None


def _checked(check: Callable[[str], object]) -> Callable[[str | None, Site], str | None]:
    """A value sent as given, which the controller reads (and checks) again: checked here first with
    the controller's own reader (``xce.units``), so that a typo is bad usage said before anything is
    sent (exit 2), in the words the controller would have used."""
    def resolve(value: str | None, site: Site) -> str | None:
        if not value:
            return value or None
        from xce.errors import InvalidRequest

        try:
            check(value)
        except (ValueError, InvalidRequest) as e:  # (the run limit's reader raises ValueError)
            raise JobSpecError(str(e)) from None
        return value
    return resolve


def _size(what: str) -> Callable[[str], object]:
    def check(text: str) -> object:
        from xce.units import parse_size

        return parse_size(text, what)
    return check


def _run_limit(what: str) -> Callable[[str], object]:
    def check(text: str) -> object:
        from xce.units import parse_run_limit

        return parse_run_limit(text, what)
    return check


def _signal_name(text: str) -> object:
    from xce.units import parse_signal

    return parse_signal(text)


def _scratch(value: str | None, site: Site) -> str | None:
    """``SIZE[:CLASS]``: the size checked here (the class is the controller's to know)."""
    if not value:
        return None
    head, sep, _ = value.rpartition(":")
    _checked(_size("--scratch size"))(head if sep else value, site)
    return value


def _script(value: str | None, site: Site) -> str | None:
    """The script's text, read here (the job runs where this file may not be): a path from the
    submission directory, or ``-``, standard input."""
    if value is None:
        return None
    if value == "-":
        if site.stdin is None:
            raise JobSpecError("--script -: there is no standard input to read the script from")
        text = site.stdin()
        where = "standard input"
    else:
        path = os.path.join(site.cwd, value)
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_SCRIPT + 1)
        except OSError as e:
            raise JobSpecError(f"cannot read the script {value}: {e.strerror}") from None
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise JobSpecError(f"the script {value} is not UTF-8 text") from None
        where = value
    if not text.strip():
        raise JobSpecError(f"the script from {where} is empty")
    if len(text) > MAX_SCRIPT or "\0" in text:
        raise JobSpecError(f"the script from {where} is not a script (over {MAX_SCRIPT >> 20} MiB, or binary)")
    return text


def _command(value: list[str] | None, site: Site) -> tuple[str, ...]:
    """The command: an argument vector, one command line (``--shell``), or a script's arguments."""
    command = tuple(value or ())
    if site.fields.get("script") is not None:
        if site.fields.get("shell"):
            raise JobSpecError("--shell runs a command line, --script a script: give one of them")
        return command
    if not command:
        raise JobSpecError("the following arguments are required: CMD (or --script FILE)")
    if site.fields.get("shell") and len(command) != 1:
        raise JobSpecError(f"--shell takes the command line as one argument (quote it), got {len(command)}")
    return command


def parse_env(spec: str, environ: Mapping[str, str]) -> tuple[dict[str, str] | None, bool]:
    """LSF's ``-env``: ``all`` (the whole environment), ``none``, ``all, ~NAME, NAME=VALUE`` (all but
    NAME, NAME set), or ``NAME, NAME=VALUE, ...`` (only these: a bare NAME from the environment).  The
    job's variables and whether they are the whole environment; XCE's tokens are never among them.
    A value with a comma is quoted: ``NAME='a,b'``."""
    items = _env_items(spec)
    if not items:
        raise JobSpecError("--env needs all, none or NAME=VALUE,...")
    head = items[0].lower()
    whole = head == "all"
    if head in ("all", "none"):
        items = items[1:]
    elif any(i.lower() in ("all", "none") for i in items):
        raise JobSpecError(f"--env {spec!r}: all or none comes first")
    env: dict[str, str] = dict(environ) if whole else {}
    for item in items:
        name, eq, value = item.partition("=")
        name = name.strip()
        if name.startswith("~"):
            if not whole:
                raise JobSpecError(f"--env {spec!r}: ~{name[1:]} leaves a variable out of all; it needs all first")
            env.pop(name[1:], None)
            continue
        if not name or "\0" in name or any(c.isspace() for c in name):
            raise JobSpecError(f"--env {spec!r}: {item!r} is not NAME or NAME=VALUE")
        if eq:
            env[name] = value
        elif name in environ:
            env[name] = environ[name]
    env = {k: v for k, v in env.items() if not never_sent(k, v) and "=" not in k and "\0" not in k + v}
    if head == "none" and not env:
        return None, False
    return env, whole


def _env_items(spec: str) -> list[str]:
    """``spec`` split at commas outside single or double quotes, each item trimmed and unquoted."""
    items, item, quote = [], "", ""
    for c in spec:
        if quote:
            if c == quote:
                quote = ""
            else:
                item += c
        elif c in "'\"":
            quote = c
        elif c == ",":
            items.append(item.strip())
            item = ""
        else:
            item += c
    if quote:
        raise JobSpecError(f"--env {spec!r}: a quote is not closed")
    items.append(item.strip())
    return [i for i in items if i]


def _env(value: str | None, site: Site) -> dict[str, str] | None:
    """``--env`` (``all`` by default: the submitter's environment goes with the job, as LSF's does)."""
    env, whole = parse_env("all" if value is None else value, site.environ)
    site.fields["env_all"] = whole and bool(env)
    return env or None


# ---------------------------------------------------------------- the table

# In the order ``xce submit --help`` lists them, which is also the order they are resolved in (a
# path option reads ``cwd``; ``stage_size`` reads ``stage_in``; ``resreq`` is checked last of all,
# after anything that may have asked the controller for its remotes).
OPTIONS: tuple[Option, ...] = (
    Option("queue", ("-q", "--queue"), "queue (default: the default queue)", bsub=("-q",)),
    Option("slots", ("-n", "--slots"), "slots (default 1)", type=positive_int, default=1,
           bsub=("-n",)),
    Option("resreq", ("-R", "--resreq"), "resource requirement: select[...] rusage[...] span[...] order[...] "
           "(repeatable: select[] sections and'ed, rusage[] joined, as LSF merges them)", kind="append",
           default="", resolve=_resreq, bsub=("-R",)),
    Option("gpu", ("--gpu",), "GPUs on each of the job's hosts, as LSF's -gpu: num=N[:mode=shared|exclusive_process]"
           "[:j_exclusive=yes|no][:gmodel=NAME][:gmem=SIZE] (- : one GPU of its own); the job sees only its own "
           "(CUDA_VISIBLE_DEVICES)", metavar="REQ", resolve=_gpu, bsub=("-gpu",)),
    Option("name", ("-J", "--name"), "job name; NAME[1-100] submits a job array", bsub=("-J",)),
    Option("stdout", ("-o", "--stdout"), "output file (%%J: job id, %%I: array index)", resolve=_job_path("stdout"),
           bsub=("-o",)),
    Option("stderr", ("-e", "--stderr"), "error file (default: with the output)", resolve=_job_path("stderr"),
           bsub=("-e",)),
    Option("project", ("-P", "--project"), "project (default: your first project)", bsub=("-P",)),
    Option("cwd", ("--cwd",), "working directory (default: here, where you submit from; where this directory "
           "cannot be entered on the job's host, the job's workspace, and xce job show says so)",
           resolve=_job_path("cwd"), bsub=("-cwd",)),
    Option("rerunnable", ("-r", "--rerunnable"), "requeue if its host is lost", kind="flag", bsub=("-r",)),
    Option("mem_limit", ("-M", "--mem-limit"), "memory each host's part of the job may use (512Mi, 4G; a bare "
           "number is bytes); beyond it the job is killed and ends EXIT (default: its rusage[mem=] reservation, if "
           "any)", metavar="SIZE", resolve=_mem_limit, bsub=("-M",)),
    Option("hold", ("-H", "--hold"), "submit held (PSUSP) until released", kind="flag", bsub=("-H",)),
    Option("run_limit", ("-W", "--run-limit"), "end the run this long after it starts ([HH:]MM; the kill path), "
           "EXIT with 'run limit H:MM reached' (default: the queue's)", metavar="[HH:]MM",
           resolve=_checked(_run_limit("run limit (-W)")), bsub=("-W",)),
    Option("run_estimate", ("-We", "--run-estimate"), "how long the run is expected to take ([HH:]MM)",
           metavar="[HH:]MM", resolve=_checked(_run_limit("run estimate (-We)")), bsub=("-We",)),
    Option("warning_action", ("-wa", "--warning-action"), "a signal sent once, -wt before the run limit "
           "(USR1, 10...)", metavar="SIGNAL", resolve=_checked(_signal_name), bsub=("-wa",)),
    Option("warning_time", ("-wt", "--warning-time"), "how long before the run limit the -wa signal comes "
           "([HH:]MM)", metavar="[HH:]MM", resolve=_checked(_run_limit("warning time (-wt)")), bsub=("-wt",)),
    Option("dependency", ("-w", "--dependency"), "start only once this holds: done(ID|\"NAME\"), ended(), "
           "exit(ID[, OP CODE]), started(), post_done(), post_err(), numdone(ARRAY, OP N|*), numended(), "
           "numexit(); && || ! ( ); NAME may hold *; ID[INDEX] is an array element", metavar="EXPR",
           resolve=_dependency, bsub=("-w",)),
    Option("terminate_orphan", ("-ti", "--terminate-orphan"), "end the job (EXIT) if its -w dependency can "
           "never hold, instead of leaving it pending", kind="flag", bsub=("-ti",)),
    Option("user_priority", ("-sp", "--priority"), "the job's priority within its queue, 1 to the site's "
           "max_user_priority (default half of it); higher starts first", type=positive_int, metavar="PRIORITY",
           bsub=("-sp",)),
    Option("begin_time", ("-b", "--begin"), "do not start the job before this local time: "
           "[[[YYYY:]MM:]DD:]hh:mm (a time passed today is tomorrow's)", metavar="[[[YYYY:]MM:]DD:]hh:mm",
           resolve=_begin_time, bsub=("-b",)),
    Option("exclusive", ("-x", "--exclusive"), "run alone: the job's hosts run nothing else while it holds them",
           kind="flag", bsub=("-x",)),
    Option("requeue_exit", ("-Q", "--requeue-exit"), "requeue the job when it exits with one of these codes: "
           "\"CODE ...\", \"all ~CODE ...\", EXCLUDE(CODE ...) (requeued, not to the same host); replaces the "
           "queue's", metavar="CODES", resolve=_requeue_exit, bsub=("-Q",)),
    Option("pre_exec", ("-E", "--pre-exec"), "a command line run before the job's command, as the job; if it "
           "fails the job is requeued to another host", metavar="CMD", resolve=_if_given, bsub=("-E",)),
    Option("post_exec", ("-Ep", "--post-exec"), "a command line run after the job's command ends (with "
           "$LSB_JOBEXIT_STAT); its failure satisfies post_err()", metavar="CMD", resolve=_if_given,
           bsub=("-Ep",)),
    Option("claims", ("--claim",), "a standalone claim the job uses, at $XCE_CLAIM_<NAME> (repeatable)",
           kind="append", metavar="NAME[:rw|ro]"),
    Option("scratch", ("--scratch",), "per-run scratch space, at $XCE_SCRATCH", metavar="SIZE[:CLASS]",
           resolve=_scratch),
    Option("stage_in", ("--stage-in",), "copy SRC into $XCE_STAGE (as DEST) before the job starts; SRC a path, "
           "a URL (https://..., s3://...) or REMOTE:path (xce transfers list) (repeatable)", kind="append",
           metavar="SRC[:DEST]", resolve=_stage_in),
    Option("stage_out", ("--stage-out",), "copy $XCE_STAGE/SRC to DEST (default: here) after the job ends; DEST a "
           "path, an s3:// URL or REMOTE:path (repeatable)", kind="append", metavar="SRC[:DEST]",
           resolve=_stage_out),
    Option("stage_size", ("--stage-size",), "room for $XCE_STAGE on the job's host, reserved on its scratch "
           "(default: the size of the --stage-in sources, measured here)", metavar="SIZE", resolve=_stage_size),
    Option("stage_class", ("--stage-class",), "the staging claim's class (default: the site's); a shared-scope "
           "class stages in from URLs and remotes while the job waits in the queue, before hosts are allocated",
           metavar="CLASS", resolve=_if_given),
    Option("app", ("--app",), "an application profile (its template claims come along)", metavar="PROFILE",
           resolve=_if_given),
    Option("shell", ("--shell",), "the command is one command line, run by /bin/sh -c (as bsub runs its command)",
           kind="flag"),
    Option("script", ("--script",), "the job is this script, read here (- : standard input), run with its #! "
           "interpreter or /bin/sh; the arguments after -- are its arguments", metavar="FILE", resolve=_script),
    Option("env", ("--env",), "the job's environment, as LSF's -env: all (default: yours), none, "
           "\"all, ~NAME, NAME=VALUE\" or \"NAME, NAME=VALUE,...\" (only these); XCE_TOKEN never goes",
           metavar="SPEC", resolve=_env, bsub=("-env",)),
    Option("command", ("command",), "the command and its arguments, after --", kind="command", metavar="CMD",
           resolve=_command),
)

# the order fields are resolved in, where it differs from the table's: the paths before what reads
# them, the remote-dependent stage options before the -R check
_ORDER = ("cwd", "stdout", "stderr", "stage_in", "stage_out", "stage_size", "resreq", "shell", "script")


def add_options(parser: argparse.ArgumentParser) -> None:
    """The submission options, as ``xce submit`` spells them, on ``parser`` (argparse's ``dest`` is
    the ``Submission`` field)."""
    for o in OPTIONS:
        if o.kind == "command":
            parser.add_argument(o.field, nargs="*", metavar=o.metavar, help=o.help)
        elif o.kind == "flag":
            parser.add_argument(*o.flags, dest=o.field, action="store_true", help=o.help)
        elif o.kind == "append":
            parser.add_argument(*o.flags, dest=o.field, action="append", default=[], metavar=o.metavar,
                                help=o.help)
        else:
            parser.add_argument(*o.flags, dest=o.field, type=o.type or str, default=o.default, metavar=o.metavar,
                                help=o.help)


def submission(values: argparse.Namespace | Mapping[str, Any], *, cwd: str,
               remote_names: Callable[[], Collection[str]] = frozenset, environ: Mapping[str, str] | None = None,
               stdin: Callable[[], str] | None = None, lsf_unit: str | None = None) -> Submission:
    """The ``Submission`` that parsed options ``values`` (by field name) ask for, for a user standing
    in ``cwd`` with the environment ``environ`` (what ``--env all`` sends; None: none) and a standard
    input ``stdin`` reads (``--script -``); ``lsf_unit``: sizes as the bsub path reads them (``Site``).
    Raises ``JobSpecError``."""
    given = values if isinstance(values, Mapping) else vars(values)
    site = Site(cwd, remote_names, environ, stdin, lsf_unit)
    by_field = {o.field: o for o in OPTIONS}
    order = [*_ORDER, *(o.field for o in OPTIONS if o.field not in _ORDER)]
    for field in order:
        option = by_field[field]
        value = given.get(field, [] if option.kind == "append" else option.default)
        site.fields[field] = option.resolve(value, site) if option.resolve is not None else value
    site.fields["submit_dir"] = cwd  # the job starts here unless --cwd says otherwise
    return Submission(**{k: v for k, v in site.fields.items() if v is not None})


# ---------------------------------------------------------------- bsub: LSF's spelling column


class Planned:
    """A ``bsub`` option whose feature XCE does not have yet: parsed (so its value is never taken for
    the command), then refused with ``why``, never ignored.  Once an ``OPTIONS`` row spells it in its
    ``bsub`` column (the feature has landed), the row wins and this entry is passed over."""

    __slots__ = ("flags", "why", "takes_value")

    def __init__(self, flags: tuple[str, ...], why: str, *, takes_value: bool = True) -> None:
        self.flags, self.why, self.takes_value = flags, why, takes_value


BSUB_PLANNED: tuple[Planned, ...] = (
    Planned(("-G",), "user groups (-G) are not there: XCE charges projects (-P)"),
    Planned(("-U",), "advance reservations (-U) are not there yet"),
    Planned(("-I", "-Ip", "-Is", "-IS", "-ISp", "-ISs", "-IX"), "interactive jobs (-I, -Ip, -Is...) are not there "
            "yet: submit a batch job and follow its output with bpeek -f", takes_value=False),
)


def bsub_parser(parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``bsub`` command line: ``OPTIONS``' bsub column (``dest`` the field), ``-nnodes``, the planned
    options, then the command (or nothing: the script comes from stdin).  Unset options are left out
    of the namespace, so a command line's options can be laid over a script's ``#BSUB`` lines."""
    p = parser_class(prog="bsub", allow_abbrev=False, usage="bsub [options] command [arguments] | bsub [options] "
                     "< script | bsub [options] script")
    spelled: set[str] = set()
    for o in OPTIONS:
        if not o.bsub or o.kind == "command":
            continue
        spelled.update(o.bsub)
        if o.kind == "flag":
            p.add_argument(*o.bsub, dest=o.field, action="store_true", default=argparse.SUPPRESS, help=o.help)
        else:  # repeatable where LSF merges them (-R); else the last one given
            p.add_argument(*o.bsub, dest=o.field, action="append" if o.kind == "append" else "store",
                           type=o.type or str, default=argparse.SUPPRESS, metavar=o.metavar, help=o.help)
    p.add_argument("-nnodes", dest="nnodes", type=positive_int, default=argparse.SUPPRESS,
                   help="spread the slots (-n) evenly over this many hosts (not whole hosts: XCE shares them)")
    for planned in BSUB_PLANNED:
        if spelled.isdisjoint(planned.flags):
            p.add_argument(*planned.flags, dest=f"planned {planned.flags[0]}", default=argparse.SUPPRESS,
                           action="store" if planned.takes_value else "store_true", help=f"(refused: {planned.why})")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command line, run by /bin/sh (none: a script "
                   "from stdin)")
    return p


def bsub_directives(script: str) -> list[str]:
    """The words of a script's ``#BSUB`` lines, split like shell words, in order.  LSF reads them up
    to the first line that is neither a comment nor blank; so does this."""
    import shlex

    words: list[str] = []
    for line in script.splitlines()[1 if script.startswith("#!") else 0:]:
        text = line.strip()
        if not text:
            continue
        if not text.startswith("#"):
            break
        if text.startswith("#BSUB"):
            try:
                words += shlex.split(text[len("#BSUB"):], comments=True)
            except ValueError as e:
                raise JobSpecError(f"cannot read the script's line {line.strip()!r}: {e}") from None
    return words


def _nodes(given: dict[str, Any]) -> list[str]:
    """``-nnodes N`` as a placement: the slots (``-n``, else one a host) spread evenly over N hosts,
    ``span[hosts=1]`` for one.  LSF gives such jobs whole hosts; XCE places them so, sharing the hosts."""
    nodes = given.pop("nnodes", None)
    if nodes is None:
        return []
    if any("span[" in text for text in given.get("resreq") or ()):
        raise JobSpecError("-nnodes and an -R span[...] both place the job: give one")
    if nodes == 1:
        return ["span[hosts=1]"]
    slots = given.setdefault("slots", nodes)
    if slots % nodes:
        raise JobSpecError(f"-nnodes {nodes} needs a multiple of {nodes} slots (-n), got {slots}")
    return [f"span[ptile={slots // nodes}]"]


def bsub_values(argv: list[str], script: str | None, *, source: str = "-",
                parser: argparse.ArgumentParser | None = None) -> dict[str, Any]:
    """The fields a ``bsub`` command line and its script's ``#BSUB`` lines ask for (the command line
    wins), in LSF's meanings, for ``submission`` (with ``lsf_unit``: LSF's sizes).  ``script`` is the
    script's text when there is one, read from ``source`` (``-``: standard input, else its path);
    a command line runs through ``/bin/sh -c``.  ``parser``: one ``bsub_parser`` made already
    (building one costs ~3 ms, which a loop of bsub calls pays each time).  Raises ``JobSpecError``
    for an option whose feature is not there yet (``BSUB_PLANNED``)."""
    parser = parser or bsub_parser()
    given: dict[str, Any] = {}
    if script is not None:
        directives = vars(parser.parse_args(bsub_directives(script)))
        if directives.pop("command", None):
            raise JobSpecError("a #BSUB line names a command: #BSUB lines hold options only")
        given.update(directives)
    given.update(vars(parser.parse_args(argv)))
    for key in given:
        if key.startswith("planned "):
            flag = key.split(" ", 1)[1]
            raise JobSpecError(next(p.why for p in BSUB_PLANNED if flag in p.flags))
    words = given.pop("command", None) or []
    if words and words[0] == "--":
        words = words[1:]
    if script is not None:
        given["script"], given["command"] = source, []
    elif not words:
        raise JobSpecError("no command: give a command line, or a script on stdin or as the only argument")
    else:
        given["shell"], given["command"] = True, [" ".join(words)]
    given["resreq"] = [*(given.get("resreq") or []), *_nodes(given)]
    if given.get("stderr") is not None and given.get("stderr") == given.get("stdout"):
        del given["stderr"]  # one file for both, opened once (XCE's default: errors with the output)
    return given


# ---------------------------------------------------------------- xce mod and bmod: the same rows

# what a pending job may have changed (``xce.model.job_changes``), in the order --help lists them
MOD_FIELDS = ("queue", "slots", "resreq", "name", "run_limit", "dependency", "user_priority")


def add_mod_options(parser: argparse.ArgumentParser, *, lsf: bool = False) -> None:
    """``xce mod``'s options (``lsf``: ``bmod``'s, bsub's spellings): the ``OPTIONS`` rows of what a pending
    job may have changed, and ``-Wn``/``-wn``, which take its run limit or its dependency away (LSF's)."""
    for o in OPTIONS:
        if o.field not in MOD_FIELDS:
            continue
        flags = o.bsub if lsf else o.flags
        help = o.help if o.field != "name" else "the job's new name; for an array, %N: its new limit (-J %50)"
        parser.add_argument(*flags, dest=o.field, type=o.type or str, default=None, metavar=o.metavar, help=help,
                            action="append" if o.kind == "append" else "store")
    parser.add_argument("-Wn", dest="no_run_limit", action="store_true", help="take the run limit away (the "
                        "queue's run_limit applies)")
    parser.add_argument("-wn", dest="no_dependency", action="store_true", help="take the dependency away")


def mod_changes(values: argparse.Namespace | Mapping[str, Any], *, lsf_unit: str | None = None) -> dict[str, Any]:
    """The body of ``POST /v1/jobs/{id}/modify`` that parsed ``add_mod_options`` values ask for, each
    checked as a submission's is (``JobSpecError``); ``-J %N`` is an array's new limit."""
    given = values if isinstance(values, Mapping) else vars(values)
    site = Site(os.getcwd(), frozenset, lsf_unit=lsf_unit)
    by_field = {o.field: o for o in OPTIONS}
    body: dict[str, Any] = {}
    for field in MOD_FIELDS:
        value = given.get(field)
        if value is None or value == []:
            continue
        option = by_field[field]
        body[field] = option.resolve(value, site) if option.resolve is not None else value
    name = body.pop("name", None)
    if name is not None:
        if name.startswith("%"):
            limit = name[1:]
            if not limit.isdigit() or int(limit) < 1:
                raise JobSpecError(f"-J {name}: an array's limit is %N, N a positive number")
            body["array_limit"] = int(limit)
        else:
            body["name"] = name
    for flag, field in (("no_run_limit", "run_limit"), ("no_dependency", "dependency")):
        if given.get(flag):
            if field in body:
                raise JobSpecError(f"-{'W' if field == 'run_limit' else 'w'}n takes the {field.replace('_', ' ')} "
                                   "away: give it or a new one, not both")
            body[field] = ""
    if not body:
        raise JobSpecError("nothing to change: give -q, -n, -R, -J, -W, -w, -sp, -Wn or -wn")
    return body
