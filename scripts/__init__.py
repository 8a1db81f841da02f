"""Developer and deployment tooling: the nginx config renderer and the local cluster runner."""
