"""Command line: `a2a-server serve`, `migrate` (`serve.py`), `hash-key`, `worker` (a remote worker,
`worker.py`), and the admin commands against `DATABASE_URL`: `prune` and `tasks list|show|tail|cancel`
(`admin.py`). The programs and their assembly live in this package: it may import every room, and nothing
else in `app/` imports it.

A bad setting is one clear line. Here are the argument parsers and what each command is called with; each
program's modules are imported only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta

from .serve import load_settings

DESCRIPTION = """Command line: `a2a-server serve`, `migrate`, `hash-key`, `worker`, and the admin commands
against `DATABASE_URL`: `prune` and `tasks list|show|tail|cancel`.

A bad setting is one clear line."""
"""What `a2a-server --help` says (the module's docstring is for who reads the code)."""


def hash_key(key: str | None, generate: bool) -> None:
    """Print the API_KEYS entry for a key (read from stdin when not given), or for a new random key."""
    from app.api.edge.auth import hash_key as digest, new_key

    if generate:
        key = new_key()
        print(f"key (give it to the client, it is not stored): {key}")
    elif key is None:
        key = sys.stdin.readline().strip()
    if not key:
        sys.exit("error: no key given (an argument, a line on stdin, or --generate)")
    print(f"sha256: {digest(key)}")
    print(f"""API_KEYS entry: {{"{digest(key)}": "<principal>"}}""")


def prune(args: argparse.Namespace) -> None:
    from . import admin

    settings = load_settings()
    if args.older_than is not None:
        try:
            age = admin.parse_age(args.older_than)
        except admin.AdminError as exc:
            sys.exit(f"error: {exc}")
    elif settings.task_retention_days:
        age = timedelta(days=settings.task_retention_days)
    else:
        sys.exit("error: TASK_RETENTION_DAYS is 0 (keep everything): say how old with --older-than, e.g. 30d")
    admin.run(admin.prune(settings, age, args.dry_run, args.json, sys.stdout))


def tasks(args: argparse.Namespace) -> None:
    from app.store.browse import Filters

    from . import admin

    settings = load_settings()
    out = sys.stdout
    if args.tasks_command == "list":
        try:
            filters = Filters(
                owner=args.owner,
                state=admin.parse_state(args.state) if args.state else None,
                role=args.role,
                context_id=args.context,
                changed_after=admin.parse_since(args.since) if args.since else None,
            )
        except admin.AdminError as exc:
            sys.exit(f"error: {exc}")
        admin.run(admin.tasks_list(settings, filters, args.limit, args.json, out))
    elif args.tasks_command == "show":
        admin.run(admin.tasks_show(settings, args.id, args.json, out))
    elif args.tasks_command == "tail":
        admin.run(admin.tasks_tail(settings, args.id, args.lines, args.json, out))
    else:
        admin.run(admin.tasks_cancel(settings, args.id, args.reason, args.json, out))


def _admin_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pr = sub.add_parser(
        "prune",
        help="delete the tasks that ended long ago, with their rows (as the retention pass does)",
    )
    pr.add_argument(
        "--older-than", help="ended more than this long ago: 30d, 12h, 90m (default: TASK_RETENTION_DAYS)"
    )
    pr.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")
    pr.add_argument("--json", action="store_true", help="JSON instead of a table")
    tk = sub.add_parser("tasks", help="look at and cancel tasks in DATABASE_URL, whoever owns them")
    tsub = tk.add_subparsers(dest="tasks_command", required=True)
    ls = tsub.add_parser("list", help="tasks, newest status first")
    ls.add_argument("--state", help="e.g. working, input-required, completed")
    ls.add_argument("--context", help="a contextId")
    ls.add_argument("--owner", help="a principal")
    ls.add_argument("--role", help="a role (agent)")
    ls.add_argument("--since", help="status changed since: an age (2h, 7d) or an ISO-8601 time")
    ls.add_argument("--limit", type=int, default=50, help="most tasks listed (default 50)")
    ls.add_argument("--json", action="store_true", help="JSON instead of a table")
    sh = tsub.add_parser(
        "show", help="one task: status, history, artifacts, transitions, lease, push deliveries, usage"
    )
    sh.add_argument("id")
    sh.add_argument("--json", action="store_true", help="JSON instead of text")
    tl = tsub.add_parser("tail", help="print the task's events as they come, until it ends (or Ctrl-C)")
    tl.add_argument("id")
    tl.add_argument("-n", "--lines", type=int, default=10, help="earlier events printed first (default 10)")
    tl.add_argument("--json", action="store_true", help="one JSON object per event (seq and StreamResponse)")
    cn = tsub.add_parser("cancel", help="cancel a task where it runs (its agent is stopped)")
    cn.add_argument("id")
    cn.add_argument(
        "--reason", default=None, help="its status message (default: canceled by an administrator)"
    )
    cn.add_argument("--json", action="store_true", help="JSON instead of text")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="a2a-server", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="serve the A2A endpoints")
    sub.add_parser("migrate", help="upgrade the database to the newest migration")
    hk = sub.add_parser("hash-key", help="print the sha256 that API_KEYS stores for an API key")
    hk.add_argument("key", nargs="?", help="the key (default: one line from stdin)")
    hk.add_argument("--generate", action="store_true", help="make a new random key and print both")
    wk = sub.add_parser("worker", help="run one role's agents here for a server elsewhere (a remote worker)")
    wk.add_argument(
        "--server", required=True, help="the server's base URL (its load balancer), e.g. https://a2a.example"
    )
    wk.add_argument("--role", required=True, help="the role whose tasks this worker runs")
    wk.add_argument("--instance", help="this worker's instance name (default: hostname-pid)")
    wk.add_argument("--slots", type=int, help="agent runs at once (default: the role's slots)")
    _admin_parsers(sub)
    args = parser.parse_args(argv)
    if args.command == "prune":
        prune(args)
    elif args.command == "tasks":
        if args.tasks_command == "cancel" and args.reason is None:
            from .admin import ADMIN_REASON

            args.reason = ADMIN_REASON
        tasks(args)
    elif args.command == "hash-key":
        hash_key(args.key, args.generate)
    elif args.command == "worker":
        from .worker import main as worker

        worker(args.server, args.role, args.instance, args.slots)
    else:
        from .serve import migrate, serve

        {"serve": serve, "migrate": migrate}[args.command]()


if __name__ == "__main__":
    main()
