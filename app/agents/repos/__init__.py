"""A task's repository: where it may come from (`source.py`), the shared cache of mirrors and a checkout per
context (`cache.py`), what a turn changed (`changes.py`), files the client attached (`attachments.py`) and
the push of the task's branch (`push.py`), all on the `git` binary (`git.py`).

The checkout is the agent's: inside its jail it may rewrite anything, `.git` included (hooks, config,
filters). So the server's own git commands on a checkout after a turn run with overrides that keep a
checkout's config from running anything (`git.Worktree`), and, given the task's jail as a launcher, with no
more rights than the agent had; the push runs in the server's mirror, never in the checkout. Nothing is
imported here.
"""
