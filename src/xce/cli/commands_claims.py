"""Claim commands: ``claim create|list|show|delete|purge``, ``claimclass list``, ``orphans``."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from xce.cli.base import Parser
from xce.cli.errors import EXIT_OK, EXIT_REFUSED, UsageError
from xce.client import Client
from xce.client.states import ClaimState
from xce.cli.output import ago, fields, print_json, print_table, size, when

CLAIM_STATES = tuple(ClaimState)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    claim = sub.add_parser("claim", parents=[common], help="standalone claims: create, list, show, delete")
    csub = claim.add_subparsers(dest="claim_command", metavar="ACTION", required=True, parser_class=Parser)
    c = csub.add_parser("create", parents=[common], help="create a standalone claim")
    c.add_argument("name")
    c.add_argument("--class", dest="claim_class", required=True, help="claim class (xce claimclass list)")
    c.add_argument("--size", required=True, help="e.g. 500Mi, 10Gi, 2T")
    c.add_argument("--access", required=True, type=str.upper, choices=("RWO", "ROX", "RWX", "RWOP"))
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
    ls.set_defaults(func=cmd_list)

    sh = csub.add_parser("show", parents=[common], help="every field, history, attempts and attachments")
    sh.add_argument("name", help="a claim's name, or a run's template claim (j12.1:scratch)")
    sh.add_argument("--project", help="the claim's project (names are per project)")
    sh.set_defaults(func=cmd_show)

    d = csub.add_parser("delete", parents=[common], help="delete a claim (its reclaim policy decides the object's fate)")
    d.add_argument("name")
    d.add_argument("--project", help="the claim's project (names are per project)")
    d.add_argument("--wait", action="store_true", help="show progress until RELEASED (exit 1 if FAILED)")
    d.add_argument("--timeout", type=float, default=600.0)
    d.set_defaults(func=cmd_delete)

    pg = csub.add_parser("purge", parents=[common], help="release a retained object after all (admins)")
    pg.add_argument("id", type=int, help="the released claim's id (xce claim list --retained)")
    pg.set_defaults(func=cmd_purge)

    cc = sub.add_parser("claimclass", parents=[common], help="claim classes")
    ccsub = cc.add_subparsers(dest="claimclass_command", metavar="ACTION", required=True, parser_class=Parser)
    ccsub.add_parser("list", parents=[common], help="claim classes and the pools they draw on") \
        .set_defaults(func=cmd_classes)

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


def cmd_create(args, ctx) -> int:
    body: dict[str, Any] = {"name": args.name, "class": args.claim_class, "size": args.size,
                            "access_mode": args.access, "params": _params(args.param)}
    if args.reclaim:
        body["reclaim_policy"] = args.reclaim
    if args.project:
        body["project"] = args.project
    client = ctx.client()
    claim = client.post("/v1/claims", body)
    if not args.wait:
        if ctx.json:
            print_json(claim)
        else:
            print(f"Claim <{claim['name']}> (id {claim['id']}) is created: {claim['state']}, "
                  f"{size(claim['size_bytes'])} {claim['access_mode']} in class {claim['class']}.")
        return EXIT_OK
    final = wait_for(client, claim["id"], (ClaimState.READY,), args.timeout, json=ctx.json)
    if ctx.json:
        print_json(final)
    return EXIT_OK if final["state"] == ClaimState.READY else EXIT_REFUSED


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
    claims = sorted(ctx.client().get("/v1/claims", params), key=lambda c: c["id"])
    if ctx.json:
        print_json(claims)
        return EXIT_OK
    if not claims:
        print("No claims found", file=sys.stderr)
        return EXIT_OK
    print_table(("ID", "NAME", "STATE", "CLASS", "SIZE", "ACCESS", "RECLAIM", "PROJECT", "ATTACHED", "WAITING"),
                ((c["id"], c["name"], c["state"] + (" (retained)" if c["retained"] else ""), c["class"],
                  size(c["size_bytes"]), c["access_mode"], c["reclaim_policy"], c["project"],
                  len(c["attachments"]) or None, c["waiting"]) for c in claims))
    return EXIT_OK


def show_text(c: dict[str, Any]) -> str:
    out = fields([
        ("Claim", f"{c['name']} (id {c['id']})"), ("Form", c["form"]), ("Class", c["class"]),
        ("State", c["state"] + (" (object retained)" if c["retained"] else "")),
        ("Waiting", c["waiting"]), ("Size", f"{size(c['size_bytes'])} asked"
                                    + (f", {size(c['actual_bytes'])} provisioned" if c["actual_bytes"] else "")),
        ("Access mode", c["access_mode"]), ("Reclaim policy", c["reclaim_policy"]),
        ("Owner", c["owner"]), ("Project", c["project"]), ("Job", c["job_id"]),
        ("Parameters", " ".join(f"{k}={v}" for k, v in sorted(c["params"].items()))),
        ("Pool", c["pool"]), ("Host", c["host"]), ("Handle", c["handle"]),
        ("Reachable hosts", "all" if c["reachable_hosts"] is None and c["state"] == ClaimState.READY
         else ",".join(c["reachable_hosts"] or [])),
        ("Data exists", "yes" if c["data_exists"] else "no"),
        ("Attempts", c["attempts"]), ("Last error", c["last_error"]),
        ("Next retry", when(c["next_retry"])), ("Op ids", " ".join(c["op_ids"])),
        ("Created", when(c["created"])),
    ])
    if c.get("stderr_tail"):
        out += "\nProvider stderr (tail):\n" + "\n".join(f"  {line}" for line in c["stderr_tail"].splitlines()[-10:])
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


def cmd_show(args, ctx) -> int:
    claim = ctx.client().get(f"/v1/claims/{args.name}", _in_project(args))
    if ctx.json:
        print_json(claim)
    else:
        print(show_text(claim))
    return EXIT_OK


def cmd_classes(args, ctx) -> int:
    client = ctx.client()
    classes = client.get("/v1/claimclasses")
    if ctx.json:
        print_json(classes)
        return EXIT_OK
    pools = {p["name"]: p for p in client.get("/v1/pools")}

    def room(names: list[str]) -> str:
        return ", ".join(f"{n} ({size(pools[n]['capacity_bytes'] - pools[n]['used_bytes'])} free of "
                         f"{size(pools[n]['capacity_bytes'])})" if n in pools else n for n in names)

    print_table(("CLASS", "PROVIDER", "SCOPE", "ACCESS", "RECLAIM", "POOLS", "DESCRIPTION"),
                ((c["name"], c["provider"], c["scope"], ",".join(c["access_modes"]), c["reclaim_policy"],
                  room(c["pools"]), c["description"]) for c in classes))
    return EXIT_OK


def cmd_orphans(args, ctx) -> int:
    orphans = ctx.client().get("/v1/orphans")
    if ctx.json:
        print_json(orphans)
        return EXIT_OK
    if not orphans:
        print("No orphans found", file=sys.stderr)
        return EXIT_OK
    print_table(("KIND", "OBJECT", "CLASS", "CLAIM", "AGE", "WHAT NEXT"),
                ((o["kind"], o.get("handle") or o.get("name"), o["class"], o.get("claim_id"),
                  ago(o["age"]).replace(" ago", ""),
                  o.get("reason") or ("retained (tagged retain): never released" if o.get("retain")
                                      else f"released in {o['releases_in']:.0f}s" if o["releases_in"]
                                      else "being released")) for o in orphans))
    return EXIT_OK
