FROM python:3.11-slim
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
