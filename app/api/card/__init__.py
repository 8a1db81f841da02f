"""The agent card: built once per role from a `CardOptions` (`options.py`) and rendered per variant
(`build.py`), served at `/.well-known/` (`routes.py`) and signed (`signing.py`).

It may import `edge/auth.py` (the card declares the schemes the guard accepts), `deps` and the shared leaves;
not `ops/` or `bindings/`, which answer with it."""
