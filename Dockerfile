# Two images from one file:
#   docker build -t a2a-coding-server .                       the server (the last stage, `server`; the
#                                                             default target, what `docker compose up` runs)
#   docker build --target agents -t a2a-coding-server:agents .
#       the server with Node.js and the coding-agent CLIs (claude, codex, gemini) at the versions
#       scripts/install-clis.sh pins, running as uid 10001 with a /workspace volume (docker compose --profile team)
ARG NODE_VERSION=22

FROM python:3.11-slim AS base
# bubblewrap: the jail of coding-agent CLIs (AGENT_SANDBOX=bwrap); it needs a container allowed to create
# namespaces, else a CLI adapter stops start-up saying so (README "Security of coding agents").
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap && rm -rf /var/lib/apt/lists/*
WORKDIR /srv
COPY pyproject.toml README.md ./
COPY app ./app
# Editable install: the code stays in /srv beside alembic.ini and migrations/, which /readyz reads to learn
# the newest migration (a plain install would put app/ in site-packages, away from them).
RUN pip install --no-cache-dir -e .
COPY alembic.ini ./
COPY migrations ./migrations
COPY examples ./examples
ENV HOST=0.0.0.0 PORT=41242
EXPOSE 41242 50051
CMD ["a2a-server", "serve"]

# The coding-agent CLIs, installed by scripts/install-clis.sh itself: its PACKAGES list is the one place their
# versions are named (the tests run the same ones), and it checks each CLI answers --version.
FROM node:${NODE_VERSION}-bookworm-slim AS clis
COPY scripts/install-clis.sh /tmp/install-clis.sh
RUN CLI_CACHE_DIR=/opt/agent-clis bash /tmp/install-clis.sh \
    && rm -f /opt/agent-clis/.lock && npm cache clean --force

FROM base AS agents
# Node.js alone (the CLIs need no npm at run time), under /usr where the jail shows it read-only, and the
# CLIs' node_modules, which the jail binds read-only too.
COPY --from=clis /usr/local/bin/node /usr/local/bin/node
COPY --from=clis /opt/agent-clis /opt/agent-clis
ENV PATH=/opt/agent-clis/node_modules/.bin:$PATH
# A user of its own: the server, and so every jailed CLI, never runs as root. /workspace holds every
# principal's workspaces and CLI HOMEs (AGENT_WORKSPACE_ROOT); /srv/data the SQLite file when no
# DATABASE_URL is given. The code is compiled now: the user cannot write /srv/app.
ARG AGENT_UID=10001
RUN groupadd --gid "$AGENT_UID" agent \
    && useradd --uid "$AGENT_UID" --gid agent --home-dir /home/agent --create-home --shell /usr/sbin/nologin agent \
    && mkdir -p /workspace /srv/data \
    && chown agent:agent /workspace /srv/data \
    && python -m compileall -q /srv/app
ENV AGENT_WORKSPACE_ROOT=/workspace HOME=/home/agent
USER ${AGENT_UID}:${AGENT_UID}
# Every CLI starts in this image as this user (a missing library or a broken copy fails the build here).
RUN export HOME="$(mktemp -d)" \
    && node --version && claude --version && codex --version && gemini --version \
    && rm -rf "$HOME"
# Declared after the chown: a new volume starts with the folder's owner, so the agent user can write it.
VOLUME ["/workspace"]

# The default target (`docker build .`): the server as before, unchanged.
FROM base AS server
