"""Cluster and identity commands: ``ping``, ``controllers``, ``queues``, ``apps``, ``projects``, ``hosts``,
``host remove``, ``users``,
``user create|disable|enable``, ``token create|list|revoke``, ``audit``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from xce.cli.base import Parser, name_of, positive_int
from urllib.parse import quote

from xce.cli.errors import EXIT_OK, EXIT_REFUSED
from xce.client import ApiError
from xce.cli.output import ago, amount, fields, parse_since, parse_until, print_json, print_table, size, when

# GET /v1/audit's largest page (xce.api.audit; not imported: the CLI starts fast)
AUDIT_PAGE = 10_000
AUDIT_CLI_LIMIT = 1000


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    sub.add_parser("ping", parents=[common],
                   help="the leading controller: its URL, version, epoch, log position and standbys") \
        .set_defaults(func=cmd_ping)
    sub.add_parser("controllers", parents=[common],
                   help="the controllers sharing the store: leader or standby, and how far behind the log") \
        .set_defaults(func=cmd_controllers)
    sub.add_parser("queues", parents=[common], help="queues with priority and job counts (like bqueues)") \
        .set_defaults(func=cmd_queues)
    sub.add_parser("apps", parents=[common],
                   help="application profiles (submit --app): their template claims and staging class") \
        .set_defaults(func=cmd_apps)
    sub.add_parser("projects", parents=[common], help="projects you belong to (all, for admins)") \
        .set_defaults(func=cmd_projects)
    sub.add_parser("hosts", parents=[common], help="worker hosts: state, slots, counters (like bhosts)") \
        .set_defaults(func=cmd_hosts)
    host = sub.add_parser("host", parents=[common], help="one worker host: remove (admins)")
    hsub = host.add_subparsers(dest="host_command", metavar="ACTION", required=True, parser_class=Parser)
    hr = hsub.add_parser("remove", parents=[common], help="remove hosts that are gone from xce hosts (refused while "
                                                          "a worker heartbeats there or jobs or claims are on it)")
    hr.add_argument("names", nargs="+", metavar="HOST", type=name_of("host"))
    hr.set_defaults(func=cmd_host_remove)
    sub.add_parser("resources", parents=[common], help="resource types: attributes and counters, with use") \
        .set_defaults(func=cmd_resources)
    sub.add_parser("users", parents=[common], help="users and their roles (admins)") \
        .set_defaults(func=cmd_users)

    user = sub.add_parser("user", parents=[common], help="manage users (admins)")
    usub = user.add_subparsers(dest="user_command", metavar="ACTION", required=True, parser_class=Parser)
    uc = usub.add_parser("create", parents=[common], help="create a user")
    uc.add_argument("name", type=name_of("user"))
    uc.add_argument("--role", choices=("user", "admin", "daemon", "metrics"), default="user",
                    help="daemon: a worker (with --host) or the provisioner; metrics: may only scrape /metrics")
    uc.add_argument("--project", action="append", dest="projects", metavar="PROJECT",
                    help="a project the user belongs to (repeatable; default: default)")
    uc.add_argument("--host", help="daemon identities: the one host it may speak for")
    uc.set_defaults(func=cmd_user_create)
    for action, text in (("disable", "refuse every token of a user until enabled again (jobs are untouched)"),
                         ("enable", "let a disabled user's tokens work again")):
        ud = usub.add_parser(action, parents=[common], help=text)
        ud.add_argument("name", type=name_of("user"))
        ud.set_defaults(func=cmd_user_disable, disable=action == "disable")

    token = sub.add_parser("token", parents=[common], help="API tokens: create (admins), list and revoke")
    tsub = token.add_subparsers(dest="token_command", metavar="ACTION", required=True, parser_class=Parser)
    tc = tsub.add_parser("create", parents=[common], help="issue a token for a user (admins; shown once)")
    tc.add_argument("--user", required=True)
    tc.add_argument("--expires", metavar="WHEN",
                    help="when it stops working: a duration ahead (12h, 30d, 4w), an ISO time, or epoch seconds "
                         "(default: never)")
    tc.set_defaults(func=cmd_token_create)
    tl = tsub.add_parser("list", parents=[common], help="tokens: yours (admins: everyone's); never their secrets")
    tl.add_argument("--user", help="admins: only this user's tokens")
    tl.set_defaults(func=cmd_token_list)
    tr = tsub.add_parser("revoke", parents=[common], help="revoke a token by its id (admins: any; users: their own)")
    tr.add_argument("token_id", metavar="TOKEN_ID")
    tr.set_defaults(func=cmd_token_revoke)

    a = sub.add_parser("audit", parents=[common], help="the audit trail: who did what, refusals included")
    a.add_argument("--since", help="from this time: a duration back (30m, 2h, 7d), an ISO time, or epoch seconds")
    a.add_argument("--until", help="before this time (same forms as --since)")
    a.add_argument("--user", help="only this user's records (admins; users always see only their own)")
    a.add_argument("--target", help="only targets starting with this: claim/ckpt, job/12, token/")
    a.add_argument("--action", help="only this action: 'POST /v1/jobs', claim.state, orphan")
    a.add_argument("--result", help="only this result: ok, or a refusal code (forbidden, not_found...)")
    a.add_argument("--limit", type=positive_int, default=AUDIT_CLI_LIMIT,
                   help=f"the newest N records that match (default {AUDIT_CLI_LIMIT}; fetched page by page)")
    a.add_argument("--all", action="store_true", help="every record that matches, however many")
    a.set_defaults(func=cmd_audit)


def _show(ctx, value: Any, human) -> int:
    if ctx.json:
        print_json(value)
    else:
        human(value)
    return EXIT_OK


def cmd_ping(args, ctx) -> int:
    client = ctx.client()
    return _show(ctx, client.get("/v1/ping"), lambda p: print(fields([
        ("Controller", client.url), ("Leader", p.get("url") or client.url), ("Version", p["version"]),
        ("Cluster", p["cluster_id"]), ("Leader epoch", p["leader_epoch"]), ("Log position", p["log_position"]),
        ("Standbys", ", ".join(p.get("standbys", [])) or "none"), ("Store", p["store"]),
        ("You are", f"{p['user']} ({p['role']})")])))


def cmd_controllers(args, ctx) -> int:
    return _show(ctx, ctx.client().get("/v1/controllers"), lambda cs: print_table(
        ("URL", "ROLE", "LOG POSITION", "BEHIND", "SEEN"),
        ((c["url"], c["role"], c["log_position"], c["behind"], f"{c['seen']:.1f}s ago") for c in cs)))


def cmd_queues(args, ctx) -> int:
    return _show(ctx, ctx.client().get("/v1/queues"), lambda qs: print_table(
        ("QUEUE", "PRIO", "PEND", "RUN", "STAGE CLASS", "DESCRIPTION"),
        ((q["name"], q["priority"], q["pending"], q["running"], q.get("stage_class") or "-", q["description"])
         for q in qs)))


def cmd_apps(args, ctx) -> int:
    return _show(ctx, ctx.client().get("/v1/apps"), lambda apps: print_table(
        ("APP", "CLAIMS", "STAGE CLASS", "DESCRIPTION"),
        ((a["name"], " ".join(f"{c['name']}:{c['claim_class']}:{c['size']}" for c in a["claims"]) or "-",
          a.get("stage_class") or "-", a["description"]) for a in apps)))


def cmd_projects(args, ctx) -> int:
    return _show(ctx, ctx.client().get("/v1/projects"), lambda ps: print_table(
        ("PROJECT", "DESCRIPTION"), ((p["name"], p["description"]) for p in ps)))


def _counters(h: dict[str, Any]) -> str:
    used = h["counters_used"]
    return " ".join(f"{k}={amount(used.get(k, 0))}/{amount(v)}" for k, v in sorted(h["counters"].items()))


def cmd_host_remove(args, ctx) -> int:
    """Each host in turn; a refusal is one line on stderr and the rest still go (exit 1 if any was refused)."""
    client = ctx.client()
    removed, refused = [], 0
    for name in args.names:
        try:
            removed.append(client.delete(f"/v1/hosts/{quote(name, safe='')}"))
        except ApiError as e:
            if ctx.json:
                raise
            print(f"xce: host {name}: {e.message}", file=sys.stderr)
            refused += 1
            continue
        if not ctx.json:
            print(f"Host <{name}> is removed")
    if ctx.json:
        print_json(removed)
    return EXIT_REFUSED if refused else EXIT_OK


def cmd_hosts(args, ctx) -> int:
    return _show(ctx, ctx.client().get("/v1/hosts"), lambda hs: print_table(
        ("HOST", "STATE", "SLOTS", "GPUS", "COUNTERS", "ATTRS", "HEARTBEAT"),
        ((h["name"], h["state"] + (f" ({h['reason']})" if h["reason"] else ""),
          f"{h['slots_used']}/{h['slots']}", _gpus(h.get("gpus") or []), _counters(h),
          " ".join(f"{k}={v}" for k, v in sorted(h["attrs"].items())), ago(h["last_heartbeat_age"]))
         for h in hs)))


def _gpus(gpus: list[dict[str, Any]]) -> str | None:
    """``2/4 0:12 1:12 2:- 3:-``: GPUs in use of all, then each GPU's jobs (``s`` after a shared GPU's)."""
    if not gpus:
        return None
    used = sum(1 for g in gpus if g["jobs"])
    each = " ".join(f"{g['id']}:" + (",".join(str(j) for j in g["jobs"]) + ("s" if g["use"] == "shared" else "")
                                     if g["jobs"] else "-") for g in gpus)
    return f"{used}/{len(gpus)} {each}"


def _quantity(value: float, unit: str) -> str:
    return size(value) if unit == "bytes" else f"{value:g}" + (f" {unit}" if unit and unit != "count" else "")


def cmd_resources(args, ctx) -> int:
    return _show(ctx, ctx.client().get("/v1/resources"), lambda rs: print_table(
        ("RESOURCE", "LAYER", "SCOPE", "USED/TOTAL", "DESCRIPTION"),
        ((r["name"], r["layer"], r["scope"],
          ", ".join(r["values"]) or None if r["layer"] == "L1" else
          f"{_quantity(r['used'], r['unit'])}/{_quantity(r['total'], r['unit'])}", r["description"]) for r in rs)))


def cmd_users(args, ctx) -> int:
    return _show(ctx, ctx.client().get("/v1/users"), lambda us: print_table(
        ("USER", "ROLE", "PROJECTS", "HOST", "CREATED", "STATUS"),
        ((u["name"], u["role"], ",".join(u["projects"]), u["host"], when(u["created"]),
          "disabled" if u.get("disabled") else "enabled") for u in us)))


def cmd_user_create(args, ctx) -> int:
    body: dict[str, Any] = {"name": args.name, "role": args.role, "projects": args.projects or ["default"]}
    if args.host:
        body["host"] = args.host
    return _show(ctx, ctx.client().post("/v1/users", body),
                 lambda u: print(f"User <{u['name']}> created ({u['role']}, projects {','.join(u['projects'])})"))


def cmd_user_disable(args, ctx) -> int:
    action = "disable" if args.disable else "enable"
    return _show(ctx, ctx.client().post(f"/v1/users/{quote(args.name, safe='')}/{action}", {}),
                 lambda u: print(f"User <{u['name']}> is {'disabled' if u['disabled'] else 'enabled'}"))


def cmd_token_create(args, ctx) -> int:
    body: dict[str, Any] = {"user": args.user}
    if args.expires:
        body["expires"] = parse_until(args.expires)

    def human(t: dict[str, Any]) -> None:
        until = f", expires {when(t['expires'])}" if t.get("expires") else ""
        print(f"Token {t['token_id']} for user <{t['user']}>{until} (shown once; keep it secret):")
        print(t["token"])

    return _show(ctx, ctx.client().post("/v1/tokens", body), human)


def _token_status(t: dict[str, Any]) -> str:
    return "revoked" if t["revoked"] else "expired" if t["expired"] else "active"


def cmd_token_list(args, ctx) -> int:
    return _show(ctx, ctx.client().get_all("/v1/tokens", {"user": args.user}), lambda ts: print_table(
        ("TOKEN_ID", "USER", "CREATED", "EXPIRES", "STATUS"),
        ((t["token_id"], t["user"], when(t["created"]), when(t["expires"]) or "never", _token_status(t))
         for t in ts)))


def cmd_token_revoke(args, ctx) -> int:
    token_id = args.token_id
    if token_id.startswith("xce_") and token_id.count("_") >= 2:  # a secret pasted whole: send only its id
        token_id = token_id.split("_")[1]
    return _show(ctx, ctx.client().delete(f"/v1/tokens/{quote(token_id, safe='')}"),
                 lambda t: print(f"Token {t['token_id']} of user <{t['user']}> is revoked"))


def cmd_audit(args, ctx) -> int:
    """The newest ``--limit`` records (or ``--all``), oldest first like a log tail: pages of GET /v1/audit
    run newest first, each in log order, so each older page goes in front."""
    params = {"since": parse_since(args.since) if args.since else None,
              "until": parse_since(args.until) if args.until else None,
              "user": args.user, "target": args.target, "action": args.action, "result": args.result}
    want = None if args.all else args.limit
    client = ctx.client()
    records: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        size = AUDIT_PAGE if want is None else min(AUDIT_PAGE, want - len(records))
        page, cursor = client.get_page("/v1/audit", {**params, "limit": size, "cursor": cursor})
        records[:0] = page
        if cursor is None or (want is not None and len(records) >= want):
            break
    return _show(ctx, records, lambda rs: print_table(
        ("TIME", "USER", "ACTION", "TARGET", "RESULT", "DETAIL"),
        ((when(r["time"]), r["user"], r["action"], r["target"], r["result"], r["detail"]) for r in rs)))

