"""The job-spec parser: a submission's arguments, as a front door gathers them, into one ``Submission``.

Every way of submitting a job means the same through this module: ``xce submit`` today, LSF's
``bsub`` options and ``#BSUB`` script directives next (issue 31).  A front door only gathers the
argument vector, the directory the user stands in and what the submission needs of the host
(the files it names; the controller's remote names, asked only when a word could be one); what
each option means, and how it becomes a field of ``xce.wire.Submission``, is said once, here:

- ``OPTIONS`` is the table: one ``Option`` per submission option, with its spellings, its help and
  the ``Submission`` field it sets.  ``add_options`` turns the table into an ``argparse`` parser's
  arguments (the ``xce submit`` command's, in ``xce.cli.commands_jobs``).  ``bsub`` is a second spelling
  column (``Option.bsub``: ``-J``, ``-cwd``...) read by ``bsub_parser``; ``bsub_values`` reads a
  bsub command line and a script's ``#BSUB`` lines (split like shell words; the command line's
  options win) into the same fields, with LSF's meanings where they differ (``BSUB_PLANNED``: the
  options whose feature is not there yet, parsed and refused, never ignored).
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

from xce.wire import Submission


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

    def __init__(self, cwd: str, remote_names: Callable[[], Collection[str]]) -> None:
        self.cwd = cwd
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
    """Paths are read on the job's host: made absolute from here.  A URL or a remote is the
    controller's to resolve for the job's project."""
    out = []
    for text in items:
        if site.far(text):
            out.append(text)
            continue
        src, sep, dest = text.partition(":")
        site.local_sources.append(os.path.join(site.cwd, src))
        out.append(os.path.join(site.cwd, src) + (f":{dest}" if sep else ""))
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
    """Given, or what the stage-in sources hold when every one is a path here (what URLs and remotes
    hold is not measured here: give --stage-size, else [claims] stage_size)."""
    if value:
        return value
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


def _resreq(values: list[str] | str, site: Site) -> str:
    """Several ``-R`` merged as LSF merges them (``merge_resreqs``), then checked here, so a typo is shown
    with a caret under its column before anything is sent."""
    value = merge_resreqs([values] if isinstance(values, str) else values)  # (one, from a mapping)
    if value:
        from xce.resreq import ResReqError, parse_resreq  # (only when given: a plain submit stays light)

        try:
            parse_resreq(value)
        except ResReqError as e:
            raise JobSpecError(f"bad resource requirement (-R): {e.reason} at column {e.position + 1}\n"
                               f"  {e.text}\n  {' ' * e.position}^") from None
    return value


# ---------------------------------------------------------------- the table

# In the order ``xce submit --help`` lists them, which is also the order they are resolved in (a
# path option reads ``cwd``; ``stage_size`` reads ``stage_in``; ``resreq`` is checked last of all,
# after anything that may have asked the controller for its remotes).
OPTIONS: tuple[Option, ...] = (
    Option("queue", ("-q", "--queue"), "queue (default: the default queue)", bsub=("-q",)),
    Option("slots", ("-n", "--slots"), "slots (default 1)", type=positive_int, default=1,
           bsub=("-n",)),
    Option("resreq", ("-R", "--resreq"), "resource requirement: select[...] rusage[...] span[...] order[...] "
           "(repeatable: merged as LSF merges them)", kind="append", metavar="RESREQ", resolve=_resreq, bsub=("-R",)),
    Option("name", ("-J", "--name"), "job name; NAME[1-100] submits a job array", bsub=("-J",)),
    Option("stdout", ("-o", "--stdout"), "output file (%%J: job id, %%I: array index)", resolve=_job_path("stdout"),
           bsub=("-o",)),
    Option("stderr", ("-e", "--stderr"), "error file (default: with the output)", resolve=_job_path("stderr"),
           bsub=("-e",)),
    Option("project", ("-P", "--project"), "project (default: your first project)", bsub=("-P",)),
    Option("cwd", ("--cwd",), "working directory (default: the job's workspace)", resolve=_job_path("cwd"),
           bsub=("-cwd",)),
    Option("rerunnable", ("-r", "--rerunnable"), "requeue if its host is lost", kind="flag", bsub=("-r",)),
    Option("mem_limit", ("-M", "--mem-limit"), "memory each host's part of the job may use (512Mi, 4G); beyond it "
           "the job is killed and ends EXIT (default: its rusage[mem=] reservation, if any)", metavar="SIZE",
           bsub=("-M",)),
    Option("hold", ("-H", "--hold"), "submit held (PSUSP) until released", kind="flag", bsub=("-H",)),
    Option("claims", ("--claim",), "a standalone claim the job uses, at $XCE_CLAIM_<NAME> (repeatable)",
           kind="append", metavar="NAME[:rw|ro]"),
    Option("scratch", ("--scratch",), "per-run scratch space, at $XCE_SCRATCH", metavar="SIZE[:CLASS]",
           resolve=_if_given),
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
    Option("command", ("command",), "the command and its arguments, after --", kind="command", metavar="CMD"),
)

# the order fields are resolved in, where it differs from the table's: the paths before what reads
# them, the remote-dependent stage options before the -R check
_ORDER = ("cwd", "stdout", "stderr", "stage_in", "stage_out", "stage_size", "resreq")


def add_options(parser: argparse.ArgumentParser) -> None:
    """The submission options, as ``xce submit`` spells them, on ``parser`` (argparse's ``dest`` is
    the ``Submission`` field)."""
    for o in OPTIONS:
        if o.kind == "command":
            parser.add_argument(o.field, nargs="+", metavar=o.metavar, help=o.help)
        elif o.kind == "flag":
            parser.add_argument(*o.flags, dest=o.field, action="store_true", help=o.help)
        elif o.kind == "append":
            parser.add_argument(*o.flags, dest=o.field, action="append", default=[], metavar=o.metavar,
                                help=o.help)
        else:
            parser.add_argument(*o.flags, dest=o.field, type=o.type or str, default=o.default, metavar=o.metavar,
                                help=o.help)


def submission(values: argparse.Namespace | Mapping[str, Any], *, cwd: str,
               remote_names: Callable[[], Collection[str]] = frozenset) -> Submission:
    """The ``Submission`` that parsed options ``values`` (by field name) ask for, for a user standing
    in ``cwd``.  Raises ``JobSpecError``."""
    given = values if isinstance(values, Mapping) else vars(values)
    site = Site(cwd, remote_names)
    by_field = {o.field: o for o in OPTIONS}
    order = [*_ORDER, *(o.field for o in OPTIONS if o.field not in _ORDER)]
    for field in order:
        option = by_field[field]
        value = given.get(field, [] if option.kind == "append" else option.default)
        site.fields[field] = option.resolve(value, site) if option.resolve is not None else value
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
    Planned(("-W",), "run limits (-W) are not there yet (issue 32): submit without -W"),
    Planned(("-w",), "job dependencies (-w) are not there yet (issue 32)"),
    Planned(("-gpu",), "GPUs (-gpu) are not there yet (issue 33)"),
    Planned(("-env",), "choosing the job's environment (-env) is not there yet"),
    Planned(("-G",), "user groups (-G) are not there: XCE charges projects (-P)"),
    Planned(("-U",), "advance reservations (-U) are not there yet"),
    Planned(("-I", "-Ip", "-Is", "-IS", "-ISp", "-ISs", "-IX"), "interactive jobs (-I, -Ip, -Is...) are not there "
            "yet: submit a batch job and follow its output with bpeek -f", takes_value=False),
)

# LSF's size units (LSF_UNIT_FOR_LIMITS, and suffixes on -M and rusage[mem=]) are powers of 1024
_LSF_UNITS = {"K": "Ki", "M": "Mi", "G": "Gi", "T": "Ti", "P": "Pi"}
_LSF_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTPkmgtp])?[Bb]?\s*$")
_RUSAGE_MEM = re.compile(r"(\bmem\s*=\s*)(\d+(?:\.\d+)?)([KMGTPkmgtp][Bb]?)?(?![\w.])")
_SECTION = re.compile(r"([a-z]+)\s*\[")


def lsf_size(text: str, unit: str) -> str:
    """An LSF size (``-M 4000``, ``rusage[mem=4GB]``) in XCE's words: a bare number is in ``unit``
    (``LSF_UNIT_FOR_LIMITS``: KB, MB, GB...), a suffix K/KB, M/MB... is LSF's (powers of 1024).
    Anything else is passed on for XCE's own parser (``512Mi`` stays ``512Mi``)."""
    m = _LSF_SIZE.match(text)
    if m is None:
        return text
    suffix = (m.group(2) or unit[:1]).upper()
    if suffix not in _LSF_UNITS:
        raise JobSpecError(f"unknown size unit in {text!r} (LSF_UNIT_FOR_LIMITS={unit})")
    return f"{m.group(1)}{_LSF_UNITS[suffix]}"


def _sections(text: str) -> list[tuple[str, str]]:
    """``select[a] rusage[b]`` as [("select", "a"), ("rusage", "b")]; a string with no section is a
    bare select expression, as LSF reads it."""
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _SECTION.match(text, pos)
        if m is None:
            if out or text[pos:].strip() == "":
                break
            return [("select", text.strip())]
        depth, end = 1, m.end()
        while end < len(text) and depth:
            depth += {"[": 1, "]": -1}.get(text[end], 0)
            end += 1
        out.append((m.group(1), text[m.end():end - 1]))
        pos = end
        while pos < len(text) and text[pos].isspace():
            pos += 1
    if pos < len(text):
        return [("select", text.strip())] if not out else out + [("select", text[pos:].strip())]
    return out


def lsf_rusage(text: str, unit: str) -> str:
    """A resource requirement with ``rusage[mem=N]`` read in LSF's units (``lsf_size``)."""
    return _RUSAGE_MEM.sub(lambda m: m.group(1) + lsf_size(m.group(2) + (m.group(3) or ""), unit), text)


def merge_resreqs(texts: list[str]) -> str:
    """Several ``-R`` strings as LSF merges them: select sections joined with ``&&``, rusage sections
    joined, the first span and order kept.  One string is passed on as written (a caret then points
    into it)."""
    converted = [t for t in texts if t.strip()]
    if len(converted) <= 1:
        return converted[0] if converted else ""
    merged: dict[str, list[str]] = {}
    for text in converted:
        for name, body in _sections(text):
            merged.setdefault(name, []).append(body)
    parts = []
    for name, bodies in merged.items():
        if name == "select":
            body = " && ".join(f"({b})" for b in bodies) if len(bodies) > 1 else bodies[0]
        elif name == "rusage":
            body = ",".join(bodies)
        else:
            body = bodies[0]
        parts.append(f"{name}[{body}]")
    return " ".join(parts)


def bsub_parser(parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``bsub`` command line: ``OPTIONS``' bsub column (``dest`` the field), the planned options,
    then the command (or nothing: the script comes from stdin).  Unset options are left out of the
    namespace, so a command line's options can be laid over a script's ``#BSUB`` lines."""
    p = parser_class(prog="bsub", allow_abbrev=False, usage="bsub [options] command [arguments] | bsub [options] "
                     "< script | bsub [options] script")
    spelled: set[str] = set()
    for o in OPTIONS:
        if not o.bsub or o.kind == "command":
            continue
        spelled.update(o.bsub)
        if o.kind == "flag":
            p.add_argument(*o.bsub, dest=o.field, action="store_true", default=argparse.SUPPRESS, help=o.help)
        else:  # repeatable in bsub where LSF merges them (-R); else the last one given
            action = "append" if o.kind == "append" else "store"
            p.add_argument(*o.bsub, dest=o.field, action=action, type=o.type or str, default=argparse.SUPPRESS,
                           metavar=o.metavar, help=o.help)
    for planned in BSUB_PLANNED:
        if spelled.isdisjoint(planned.flags):
            p.add_argument(*planned.flags, dest=f"planned {planned.flags[0]}", default=argparse.SUPPRESS,
                           action="store" if planned.takes_value else "store_true", help=f"(refused: {planned.why})")
    p.add_argument("-nnodes", dest="nnodes", type=positive_int, default=argparse.SUPPRESS,
                   help="spread the slots (-n) evenly over this many hosts (not whole hosts: XCE shares them)")
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


SPOOL = ('f=$(mktemp "${TMPDIR:-/tmp}/bsub.XXXXXXXX") || exit 1; printf %s "$1" >"$f" || exit 1; shift; '
         '"$@" "$f"; s=$?; rm -f "$f"; exit $s')


def bsub_command(words: list[str], script: str | None) -> tuple[str, ...]:
    """What the job runs, as LSF runs it: a command line through ``/bin/sh -c``; a script (stdin, or
    a file named alone) written to a file on the execution host and run by its ``#!`` interpreter
    (else ``/bin/sh``), so it need not be executable nor be on a file system the host shares."""
    if script is None:
        if not words:
            raise JobSpecError("no command: give a command line, or a script on stdin or as the only argument")
        return ("/bin/sh", "-c", " ".join(words))
    interpreter = ["/bin/sh"]
    if script.startswith("#!"):
        head = script[2:].split("\n", 1)[0].strip()
        path, _, arg = head.partition(" ")  # as the kernel reads it: the path and at most one argument
        if path:
            interpreter = [path, *([arg.strip()] if arg.strip() else [])]
    return ("/bin/sh", "-c", SPOOL, "bsub", script, *interpreter)


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


def bsub_values(argv: list[str], script: str | None, *, unit: str,
                parser: argparse.ArgumentParser | None = None) -> dict[str, Any]:
    """The fields a ``bsub`` command line and its script's ``#BSUB`` lines ask for (the command line
    wins), in LSF's meanings, ready for ``submission``; ``unit`` is ``LSF_UNIT_FOR_LIMITS``; ``parser``
    one ``bsub_parser`` made already (building one costs ~3 ms, a loop of bsub calls pays it each
    time).  Raises ``JobSpecError`` for an option whose feature is not there yet (``BSUB_PLANNED``)."""
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
    given["command"] = bsub_command(words, script)
    if "mem_limit" in given:
        given["mem_limit"] = lsf_size(given["mem_limit"], unit)
    given["resreq"] = [lsf_rusage(text, unit) for text in [*(given.get("resreq") or []), *_nodes(given)]]
    if given.get("stderr") is not None and given.get("stderr") == given.get("stdout"):
        del given["stderr"]  # one file for both, opened once (XCE's default: errors with the output)
    return given
