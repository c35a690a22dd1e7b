"""Claim commands: ``claim create|list|show|resize|warm|evict|delete|purge|snapshot``, ``snapshot list|show|delete``,
``claimclass list``, ``orphans``."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from xce.cli.base import Parser, name_of, positive_int, size_text
from xce.cli.errors import EXIT_OK, EXIT_REFUSED, UsageError
from xce.client import ApiError, Client
from xce.client.states import RESIZE_ENDED, ClaimState, ResizeState, SnapshotState
from xce.cli.output import ago, fields, print_json, print_table, size, table, when

CLAIM_STATES = tuple(s.value for s in ClaimState)  # plain words, as JOB_STATES
SNAPSHOT_STATES = tuple(s.value for s in SnapshotState)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    claim = sub.add_parser("claim", parents=[common], help="standalone claims: create, list, show, delete")
    csub = claim.add_subparsers(dest="claim_command", metavar="ACTION", required=True, parser_class=Parser)
    c = csub.add_parser("create", parents=[common], help="create a standalone claim")
    c.add_argument("name", type=name_of("claim"))
    c.add_argument("--class", dest="claim_class", help="claim class (xce claimclass list); a clone's: its source's")
    c.add_argument("--size", type=size_text, help="e.g. 500Mi, 10Gi, 2T; a clone's: its source's (at least)")
    c.add_argument("--access", type=str.upper, choices=("RWO", "ROX", "RWX", "RWOP"),
                   help="required, but for a clone (default: its source's)")
    source = c.add_mutually_exclusive_group()
    source.add_argument("--from-snapshot", metavar="SNAP", help="a clone: start with this READY snapshot's content")
    source.add_argument("--from-claim", metavar="CLAIM", help="a clone: start with this READY claim's content")
    source.add_argument("--source", metavar="URL", help="populate the claim from a URL or REMOTE:path (s3://bucket/"
                        "prefix/, https://..., REMOTE:path; xce transfers list): READY once the data is complete "
                        "(a node-local claim: each replica, filled by its host)")
    where = c.add_mutually_exclusive_group()
    where.add_argument("--hosts", type=_host_list, metavar="H1,H2",
                       help="a node-scope class's claim: a replica on each of these hosts")
    where.add_argument("--replicas", type=positive_int, metavar="N",
                       help="a node-scope class's claim: replicas on N hosts the scheduler chooses by free room")
    c.add_argument("--cache", action="store_true",
                   help="a node-scope ROX claim with --source: replicas made where its jobs go, unused ones evicted "
                        "(least recently used) when their host's room is needed")
    c.add_argument("--snapshot-on-preempt", action="store_true",
                   help="an RWO claim of a class that takes snapshots: when a job using it is preempted, the claim "
                        "is snapshotted (CLAIM-preempt-JOB-rRUN) before it is attached again")
    c.add_argument("--reclaim", choices=("retain", "delete"), help="default: the class's")
    c.add_argument("--param", action="append", metavar="K=V", help="a class parameter (repeatable)")
    c.add_argument("--project", help="default: your first project")
    c.add_argument("--wait", action="store_true", help="show progress until READY or FAILED (exit 1 if FAILED)")
    c.add_argument("--timeout", type=float, default=600.0, help="with --wait: give up after this many seconds")
    c.set_defaults(func=cmd_create)

    ls = csub.add_parser("list", parents=[common], help="claims of your projects")
    ls.add_argument("--project")
    ls.add_argument("--state", action="append", type=str.upper, choices=CLAIM_STATES)
    ls.add_argument("-a", "--all", action="store_true", help="include RELEASED claims")
    ls.add_argument("--retained", action="store_true", help="released claims whose object is kept (admins)")
    ls.add_argument("--limit", type=positive_int, help="only the newest N that match (default: every one, "
                                                       "fetched page by page)")
    ls.set_defaults(func=cmd_list)

    sh = csub.add_parser("show", parents=[common], help="every field, history, attempts and attachments")
    sh.add_argument("name", help="a claim's name, or a run's template claim (j12.1:scratch), or its id (a name "
                                 "first: a number that names no claim is taken as an id)")
    sh.add_argument("--project", help="the claim's project (names are per project)")
    sh.set_defaults(func=cmd_show)

    rs = csub.add_parser("resize", parents=[common], help="grow a READY claim (online if its class can)")
    rs.add_argument("name")
    rs.add_argument("size", type=size_text, help="the new size, larger than the claim's: e.g. 20Gi")
    rs.add_argument("--project", help="the claim's project (names are per project)")
    rs.add_argument("--wait", action="store_true", help="show progress until the resize is done (exit 1 if it failed)")
    rs.add_argument("--timeout", type=float, default=600.0, help="with --wait: give up after this many seconds")
    rs.set_defaults(func=cmd_resize)

    for action, what in (("warm", "a node-local claim's replica more on each of these hosts"),
                         ("evict", "release a node-local claim's replica on each of these hosts (refused while "
                                   "a job there uses it)")):
        rp = csub.add_parser(action, parents=[common], help=what)
        rp.add_argument("name")
        rp.add_argument("--hosts", type=_host_list, metavar="H1,H2", required=True)
        rp.add_argument("--project", help="the claim's project (names are per project)")
        rp.set_defaults(func=cmd_warm if action == "warm" else cmd_evict)

    d = csub.add_parser("delete", parents=[common], help="delete a claim (its reclaim policy decides the object's fate)")
    d.add_argument("name", type=name_of("claim"))
    d.add_argument("--project", help="the claim's project (names are per project)")
    d.add_argument("--wait", action="store_true", help="show progress until RELEASED (exit 1 if FAILED)")
    d.add_argument("--timeout", type=float, default=600.0)
    d.set_defaults(func=cmd_delete)

    sn = csub.add_parser("snapshot", parents=[common],
                         help="take a read-only point-in-time snapshot of a claim (xce snapshot list)")
    sn.add_argument("claim", type=name_of("claim"))
    sn.add_argument("snapshot", type=name_of("snapshot"), help="the snapshot's name (per project, like claims')")
    sn.add_argument("--project", help="the claim's project (names are per project)")
    sn.add_argument("--wait", action="store_true", help="show progress until READY or FAILED (exit 1 if FAILED)")
    sn.add_argument("--timeout", type=float, default=600.0)
    sn.set_defaults(func=cmd_snapshot)

    pg = csub.add_parser("purge", parents=[common], help="release a retained object after all (admins)")
    pg.add_argument("id", type=int, help="the released claim's id (xce claim list --retained)")
    pg.set_defaults(func=cmd_purge)

    cc = sub.add_parser("claimclass", parents=[common], help="claim classes")
    ccsub = cc.add_subparsers(dest="claimclass_command", metavar="ACTION", required=True, parser_class=Parser)
    ccsub.add_parser("list", parents=[common], help="claim classes and the pools they draw on") \
        .set_defaults(func=cmd_classes)

    snap = sub.add_parser("snapshot", parents=[common], help="snapshots of claims: list, show, delete")
    ssub = snap.add_subparsers(dest="snapshot_command", metavar="ACTION", required=True, parser_class=Parser)
    sl = ssub.add_parser("list", parents=[common], help="snapshots of your projects")
    sl.add_argument("--project")
    sl.add_argument("--claim", help="of this claim only")
    sl.add_argument("--state", action="append", type=str.upper, choices=SNAPSHOT_STATES)
    sl.add_argument("-a", "--all", action="store_true", help="include RELEASED snapshots")
    sl.add_argument("--limit", type=positive_int, help="only the newest N that match (default: every one, "
                                                       "fetched page by page)")
    sl.set_defaults(func=cmd_snapshot_list)
    ss = ssub.add_parser("show", parents=[common], help="every field, history and attempts")
    ss.add_argument("name")
    ss.add_argument("--project", help="the snapshot's project (names are per project)")
    ss.set_defaults(func=cmd_snapshot_show)
    sd = ssub.add_parser("delete", parents=[common], help="delete a snapshot")
    sd.add_argument("name")
    sd.add_argument("--project", help="the snapshot's project (names are per project)")
    sd.add_argument("--wait", action="store_true", help="show progress until RELEASED (exit 1 if FAILED)")
    sd.add_argument("--timeout", type=float, default=600.0)
    sd.set_defaults(func=cmd_snapshot_delete)

    sub.add_parser("orphans", parents=[common], help="provider objects and claims nobody owns (admins)").set_defaults(func=cmd_orphans)


def _params(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--param {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


# ---------------------------------------------------------------- create, delete, --wait


def progress_line(c: dict[str, Any]) -> str:
    line = f"claim {c['name']}: {c['state']}"
    if c.get("waiting"):
        line += f", {c['waiting']}"
    if c.get("next_retry"):
        line += f", next retry in {max(0.0, c['next_retry'] - time.time()):.0f}s"
    if c.get("last_error"):
        line += f"; last error: {c['last_error']}"
    return line


def wait_for(client: Client, claim_id: int, done: tuple[str, ...], timeout: float, *,
             json: bool = False) -> dict[str, Any]:
    """Print each change until the claim reaches a state in ``done`` or FAILED; return it.

    Progress goes to stdout for people, and to stderr under ``--json``, whose stdout is only the
    final document (``xce --json claim create X --wait | jq``)."""
    out = sys.stderr if json else sys.stdout
    return client.wait_claim(claim_id, done, timeout,
                             on_change=lambda c: print(progress_line(c), file=out, flush=True))


def _in_project(args) -> dict[str, str] | None:
    return {"project": args.project} if args.project else None


def _host_list(text: str) -> tuple[str, ...]:
    """``--hosts h1,h2``: the hosts, in order (the controller checks their names)."""
    hosts = tuple(h.strip() for h in text.split(",") if h.strip())
    if not hosts:
        raise argparse.ArgumentTypeError("expected host names separated by commas")
    return hosts


def cmd_create(args, ctx) -> int:
    clone = args.from_snapshot is not None or args.from_claim is not None
    if not clone:
        missing = [o for o, v in (("--class", args.claim_class), ("--size", args.size), ("--access", args.access))
                   if v is None]
        if missing:
            raise UsageError(f"claim create: {', '.join(missing)} required (unless --from-snapshot or --from-claim)")
    if args.snapshot_on_preempt and args.access not in (None, "RWO"):
        raise UsageError(f"claim create: --snapshot-on-preempt is for RWO claims (written by one host at a time), "
                         f"not {args.access}")
    params = _params(args.param)
    client = ctx.client()
    claim = client.create_claim(args.name, claim_class=args.claim_class, size=args.size, access_mode=args.access,
                                reclaim_policy=args.reclaim, params=params, project=args.project,
                                from_snapshot=args.from_snapshot, from_claim=args.from_claim,
                                populate_from=args.source, hosts=args.hosts or (), replicas=args.replicas,
                                cache=args.cache, snapshot_on_preempt=args.snapshot_on_preempt)
    if not args.wait:
        if ctx.json:
            print_json(claim)
        else:
            source = claim.get("source")
            print(f"Claim <{claim['name']}> (id {claim['id']}) is created: {claim['state']}, "
                  f"{size(claim['size_bytes'])} {claim['access_mode']} in class {claim['class']}"
                  + (f", from {source['kind']} {source['name']}" if source else "") + ".")
        return EXIT_OK
    final = wait_for(client, claim["id"], (ClaimState.READY,), args.timeout, json=ctx.json)
    if ctx.json:
        print_json(final)
    return EXIT_OK if final["state"] == ClaimState.READY else EXIT_REFUSED


def resize_line(c: dict[str, Any]) -> str:
    r = c["resize"] or {}
    line = f"claim {c['name']}: resize to {size(r.get('size_bytes'))} {r.get('state')}"
    if r.get("waiting"):
        line += f", {r['waiting']}"
    if c.get("next_retry"):
        line += f", next retry in {max(0.0, c['next_retry'] - time.time()):.0f}s"
    if r.get("state") == ResizeState.FAILED:
        line += f"; {r.get('error')}; the claim is still {size(r.get('old_bytes'))} and {c['state']}"
    elif c.get("last_error"):
        line += f"; last error: {c['last_error']}"
    return line


def _filled(p: dict[str, Any] | None) -> str | None:
    """A replica's fill as its worker last read it: ``12.0 MiB of 64.0 MiB, 2 MiB/s``."""
    from xce.units import format_transfer

    return format_transfer(int(p.get("bytes") or 0), p.get("total_bytes"), p.get("rate")) if p else None


def _replicas_line(c: dict[str, Any]) -> str:
    return ", ".join(f"{r['host']} {r['state']}" for r in c.get("replicas") or [] if r["state"] != "RELEASED") \
        or "none"


def cmd_warm(args, ctx) -> int:
    claim = ctx.client().warm_claim(args.name, args.hosts, args.project)
    if ctx.json:
        print_json(claim)
    else:
        print(f"Claim <{claim['name']}> is warmed on {', '.join(args.hosts)}: replicas {_replicas_line(claim)}.")
    return EXIT_OK


def cmd_evict(args, ctx) -> int:
    claim = ctx.client().evict_claim(args.name, args.hosts, args.project)
    if ctx.json:
        print_json(claim)
    else:
        print(f"Claim <{claim['name']}>'s replica{'s' if len(args.hosts) > 1 else ''} on {', '.join(args.hosts)} "
              f"{'are' if len(args.hosts) > 1 else 'is'} being released: replicas {_replicas_line(claim)}.")
    return EXIT_OK


def cmd_resize(args, ctx) -> int:
    client = ctx.client()
    claim = client.resize_claim(args.name, args.size, args.project)
    if not args.wait:
        if ctx.json:
            print_json(claim)
        else:
            print(f"Claim <{claim['name']}> is being resized from {size(claim['resize']['old_bytes'])} to "
                  f"{size(claim['resize']['size_bytes'])}: {claim['resize']['state']}.")
        return EXIT_OK
    out = sys.stderr if ctx.json else sys.stdout
    final = client.wait_resize(claim["id"], args.timeout,
                               on_change=lambda c: print(resize_line(c), file=out, flush=True))
    if ctx.json:
        print_json(final)
    return EXIT_OK if final["resize"] and final["resize"]["state"] == ResizeState.DONE else EXIT_REFUSED


def cmd_delete(args, ctx) -> int:
    client = ctx.client()
    claim = client.request("DELETE", f"/v1/claims/{args.name}", params=_in_project(args))
    if not args.wait:
        if ctx.json:
            print_json(claim)
        else:
            what = claim["waiting"] if claim["state"] != ClaimState.RELEASED and claim["waiting"] else claim["state"]
            print(f"Claim <{claim['name']}> is being deleted: {what}.")
        return EXIT_OK
    final = wait_for(client, claim["id"], (ClaimState.RELEASED,), args.timeout, json=ctx.json)
    if ctx.json:
        print_json(final)
    elif final["retained"]:
        print(f"claim {final['name']}: the object {final['handle']} is retained (xce claim purge {final['id']})")
    return EXIT_OK if final["state"] == ClaimState.RELEASED else EXIT_REFUSED


# ---------------------------------------------------------------- snapshots


def snapshot_progress(s: dict[str, Any]) -> str:
    line = f"snapshot {s['name']}: {s['state']}"
    if s.get("waiting"):
        line += f", {s['waiting']}"
    if s.get("next_retry"):
        line += f", next retry in {max(0.0, s['next_retry'] - time.time()):.0f}s"
    if s.get("last_error"):
        line += f"; last error: {s['last_error']}"
    return line


def _wait_snapshot(client: Client, snapshot_id: int, done: tuple[str, ...], timeout: float,
                   json: bool) -> dict[str, Any]:
    out = sys.stderr if json else sys.stdout  # --json: stdout is only the final document
    return client.wait_snapshot(snapshot_id, done, timeout,
                                on_change=lambda s: print(snapshot_progress(s), file=out, flush=True))


def cmd_snapshot(args, ctx) -> int:
    client = ctx.client()
    snap = client.create_snapshot(args.claim, args.snapshot, args.project)
    if not args.wait:
        if ctx.json:
            print_json(snap)
        else:
            print(f"Snapshot <{snap['name']}> (id {snap['id']}) of claim <{snap['claim']}> is requested: "
                  f"{snap['state']}.")
        return EXIT_OK
    final = _wait_snapshot(client, snap["id"], (SnapshotState.READY,), args.timeout, ctx.json)
    if ctx.json:
        print_json(final)
    return EXIT_OK if final["state"] == SnapshotState.READY else EXIT_REFUSED


def cmd_snapshot_list(args, ctx) -> int:
    snaps = sorted(ctx.client().snapshots(project=args.project, claim=args.claim, states=args.state or (),
                                          all_states=args.all, limit=args.limit), key=lambda s: s["id"])
    if ctx.json:
        print_json(snaps)
        return EXIT_OK
    if not snaps:
        print("No snapshots found", file=sys.stderr)
        return EXIT_OK
    print_table(("ID", "NAME", "STATE", "CLAIM", "CLASS", "SIZE", "PROJECT", "OWNER", "CREATED", "WAITING"),
                ((s["id"], s["name"], s["state"], s["claim"], s["class"], size(s["size_bytes"]), s["project"],
                  s["owner"], when(s["created"]), s["waiting"]) for s in snaps))
    return EXIT_OK


def snapshot_text(s: dict[str, Any]) -> str:
    out = fields([
        ("Snapshot", f"{s['name']} (id {s['id']})"), ("State", s["state"]), ("Waiting", s["waiting"]),
        ("Of claim", f"{s['claim']} (id {s['claim_id']})"), ("Class", s["class"]),
        ("Taken for", f"job {s['preempted']['job_id']} run {s['preempted']['run']}, preempted"
         if s.get("preempted") else None),
        ("Size", size(s["size_bytes"]) + (f", {size(s['actual_bytes'])} taken" if s["actual_bytes"] else "")),
        ("Owner", s["owner"]), ("Project", s["project"]), ("Handle", s["handle"]),
        ("Data exists", "yes" if s["data_exists"] else "no"),
        ("Attempts", s["attempts"]), ("Last error", s["last_error"]),
        ("Next retry", when(s["next_retry"])), ("Op ids", " ".join(s["op_ids"])), ("Created", when(s["created"])),
    ])
    out += "\nHistory:\n" + "\n".join(f"  {when(h['time'])}  {h['state']:9}  {h['reason']}" for h in s["history"])
    if s["ops"]:
        out += "\nProvider attempts:\n" + "\n".join(
            f"  {when(o['time'])}  {o['op_id']:28} attempt {o['attempt']}  {o['result']}"
            + (f": {o['message']}" if o.get("message") else "") for o in s["ops"])
    return out


def cmd_snapshot_show(args, ctx) -> int:
    snap = ctx.client().snapshot(args.name, args.project)
    if ctx.json:
        print_json(snap)
    else:
        print(snapshot_text(snap))
    return EXIT_OK


def cmd_snapshot_delete(args, ctx) -> int:
    client = ctx.client()
    snap = client.delete_snapshot(args.name, args.project)
    if not args.wait:
        if ctx.json:
            print_json(snap)
        else:
            print(f"Snapshot <{snap['name']}> is being deleted: {snap['waiting'] or snap['state']}.")
        return EXIT_OK
    final = _wait_snapshot(client, snap["id"], (SnapshotState.RELEASED,), args.timeout, ctx.json)
    if ctx.json:
        print_json(final)
    return EXIT_OK if final["state"] == SnapshotState.RELEASED else EXIT_REFUSED


def cmd_purge(args, ctx) -> int:
    claim = ctx.client().post(f"/v1/claims/by-id/{args.id}/purge", {})
    if ctx.json:
        print_json(claim)
    else:
        print(f"Retained object {claim['handle']} of claim <{claim['name']}> is being released.")
    return EXIT_OK


# ---------------------------------------------------------------- list and show


def cmd_list(args, ctx) -> int:
    params: list[tuple[str, Any]] = [("project", args.project), ("all", args.all or None),
                                     ("retained", args.retained or None)]
    params += [("state", s) for s in args.state or ()]
    claims = sorted(ctx.client().get_all("/v1/claims", params, limit=args.limit), key=lambda c: c["id"])
    if ctx.json:
        print_json(claims)
        return EXIT_OK
    if not claims:
        print("No claims found", file=sys.stderr)
        return EXIT_OK
    print_table(("ID", "NAME", "STATE", "CLASS", "SIZE", "USED", "ACCESS", "RECLAIM", "PROJECT", "ATTACHED",
                 "WAITING"),
                ((c["id"], c["name"], c["state"] + (" (retained)" if c["retained"] else "")
                  + (f" ({c['replicas_ready']}/{len(c['replicas'])} replicas)" if c.get("replicas") else ""),
                  c["class"],
                  size(c["size_bytes"]) + (f" -> {size(c['resize']['size_bytes'])}" if c.get("resize") and
                                           c["resize"]["state"] not in RESIZE_ENDED else ""),
                  size(c["used_bytes"]) if c.get("used_bytes") is not None else None,
                  c["access_mode"], c["reclaim_policy"], c["project"],
                  len(c["attachments"]) or None, c["waiting"]) for c in claims))
    return EXIT_OK


def _transfer_text(t: dict[str, Any] | None) -> str | None:
    """A transfer in flight: ``1.2 GiB of 4.0 GiB copied, 310 MiB/s``."""
    if not t:
        return None
    text = f"{size(t['bytes'])}" + (f" of {size(t['total_bytes'])}" if t.get("total_bytes") else "") + " copied"
    return text + (f", {size(int(t['rate']))}/s" if t.get("rate") else "")


def show_text(c: dict[str, Any], snapshots: list[dict[str, Any]] = ()) -> str:
    out = fields([
        ("Claim", f"{c['name']} (id {c['id']})"), ("Form", c["form"]), ("Class", c["class"]),
        ("State", c["state"] + (" (object retained)" if c["retained"] else "")
         + (f" ({c['replicas_ready']} of {len(c['replicas'])} replicas READY)" if c.get("replicas") else "")),
        ("Waiting", c["waiting"]), ("Size", f"{size(c['size_bytes'])} asked"
                                    + (f", {size(c['actual_bytes'])} provisioned" if c["actual_bytes"] else "")
                                    + (f", {size(c['used_bytes'])} used" if c.get("used_bytes") is not None
                                       else "")),
        ("Resize", _resize_text(c.get("resize"))),
        ("Access mode", c["access_mode"]), ("Reclaim policy", c["reclaim_policy"]),
        ("Owner", c["owner"]), ("Project", c["project"]), ("Job", c["job_id"]),
        ("Parameters", " ".join(f"{k}={v}" for k, v in sorted(c["params"].items()))),
        ("Pool", c["pool"]), ("Host", c["host"]), ("Handle", c["handle"]),
        ("Made from", f"{c['source']['kind']} {c['source']['name']}" if c.get("source") else None),
        ("Snapshots", ", ".join(f"{x['name']} ({x['state']})" for x in snapshots if x["claim_id"] == c["id"])),
        ("Populated from", c.get("populate_from")),
        ("Cache", "yes: replicas made where its jobs go; unused ones evicted, least recently used first, when "
                  "their host's room is needed" if c.get("cache") else None),
        ("On preemption", "snapshotted before it is attached again (--snapshot-on-preempt)"
         if c.get("snapshot_on_preempt") else None),
        ("Transfer", _transfer_text(c.get("transfer"))),
        ("Reachable hosts", ",".join(r["host"] for r in c["replicas"] if r["state"] == ClaimState.READY)
         if c.get("replicas") else "all" if c["reachable_hosts"] is None and c["state"] == ClaimState.READY
         else ",".join(c["reachable_hosts"] or [])),
        ("Data exists", "yes" if c["data_exists"] else "no"),
        ("Attempts", c["attempts"]), ("Last error", c["last_error"]),
        ("Next retry", when(c["next_retry"])), ("Op ids", " ".join(c["op_ids"])),
        ("Created", when(c["created"])),
    ])
    if c.get("stderr_tail"):
        out += "\nProvider stderr (tail):\n" + "\n".join(f"  {line}" for line in c["stderr_tail"].splitlines()[-10:])
    if c.get("replicas") or c.get("replicas_to_place"):
        rows = table(("HOST", "STATE", "PROGRESS", "PATH", "ATTEMPTS", "LAST USED", "LAST ERROR"),
                     [(r["host"], r["state"], _filled(r.get("progress")), r["path"], r["attempts"],
                       ago(time.time() - r["last_used"]) if r.get("last_used") else None, r["last_error"])
                      for r in c["replicas"]])
        out += "\nReplicas:\n" + "\n".join(f"  {line}" for line in rows.splitlines())
        if c.get("replicas_to_place"):
            out += f"\n  ({c['replicas_to_place']} more on hosts the scheduler chooses)"
    if c["attachments"]:
        out += "\nAttachments:\n" + "\n".join(
            f"  #{a['id']} {a['host']} {a['mode']}" + (f" job {a['job_id']}" if a["job_id"] else "")
            + f" since {when(a['created'])}" for a in c["attachments"])
    out += "\nHistory:\n" + "\n".join(f"  {when(h['time'])}  {h['state']:9}  {h['reason']}" for h in c["history"])
    if c["ops"]:
        out += "\nProvider attempts:\n" + "\n".join(
            f"  {when(o['time'])}  {o['op_id']:20} attempt {o['attempt']}  {o['result']}"
            + (f": {o['message']}" if o.get("message") else "") for o in c["ops"])
    return out


def _resize_text(r: dict[str, Any] | None) -> str | None:
    if not r:
        return None
    text = f"{size(r['old_bytes'])} -> {size(r['size_bytes'])} {r['state']} (asked by {r['by']} {when(r['requested'])})"
    if r.get("waiting"):
        text += f"; {r['waiting']}"
    if r.get("error"):
        text += f"; {r['error']}"
    return text


def cmd_show(args, ctx) -> int:
    client = ctx.client()
    try:
        claim = client.get(f"/v1/claims/{args.name}", _in_project(args))
    except ApiError as e:  # live or archived, by name; then, for a number, by id
        if e.status != 404 or not args.name.isdigit() or args.project:
            raise
        claim = client.get(f"/v1/claims/by-id/{int(args.name)}")
    if ctx.json:
        print_json(claim)
    else:
        # a standalone claim's live snapshots (template claims have none): one more call, for people
        snaps = client.snapshots(project=claim["project"], claim=claim["name"]) if claim["form"] == "standalone" \
            else []
        print(show_text(claim, snaps))
    return EXIT_OK


def cmd_classes(args, ctx) -> int:
    client = ctx.client()
    classes = client.get("/v1/claimclasses")
    if ctx.json:
        print_json(classes)
        return EXIT_OK
    pools = {p["name"]: p for p in client.get("/v1/pools")}

    def room(names: list[str]) -> str:
        return ", ".join(f"{n} ({size(pools[n]['free_bytes'])} free of {size(pools[n]['capacity_bytes'])})"
                         if n in pools else n for n in names)

    def can(c: dict[str, Any]) -> str:
        caps = c.get("capabilities")
        if caps is None:
            return "?" if c["scope"] == "shared" else "-"  # a shared class's provider has not been asked yet
        return ",".join(word for flag, word in (("expand", "expand"), ("online_expand", "online_expand"),
                                                ("create_snapshot", "snapshot"), ("clone", "clone"))
                        if caps.get(flag)) or "-"

    print_table(("CLASS", "PROVIDER", "SCOPE", "ACCESS", "RECLAIM", "POOLS", "CAN", "DESCRIPTION"),
                ((c["name"], c["provider"], c["scope"], ",".join(c["access_modes"]), c["reclaim_policy"],
                  room(c["pools"]), can(c), c["description"]) for c in classes))
    return EXIT_OK


def cmd_orphans(args, ctx) -> int:
    orphans = ctx.client().get("/v1/orphans")
    if ctx.json:
        print_json(orphans)
        return EXIT_OK
    if not orphans:
        print("No orphans found", file=sys.stderr)
        return EXIT_OK
    print_table(("KIND", "OBJECT", "CLASS", "HOST", "CLAIM", "AGE", "WHAT NEXT"),
                ((o["kind"], o.get("handle") or o.get("name"), o["class"], o.get("host") or "-", o.get("claim_id"),
                  ago(o["age"]).replace(" ago", ""),
                  o.get("reason") or ("retained (tagged retain): never released" if o.get("retain")
                                      else f"released in {o['releases_in']:.0f}s" if o["releases_in"]
                                      else "being released")) for o in orphans))
    return EXIT_OK
