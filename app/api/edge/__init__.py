"""What stands in front of every route: the ASGI layers (`slashes.py`, `observe.py`, `metrics.py`,
`fallback.py`, the guard and CORS in `auth_guard.py`, on `asgi.py`'s `HttpLayer`) and who is calling
(`auth.py`, `jwks.py`).

It imports only the shared leaves of `api/` (paths, versions, errors, extensions, sanity, faults): never
`deps`, an endpoint or a binding, so a layer cannot come to depend on what it guards."""
