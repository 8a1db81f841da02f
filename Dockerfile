FROM python:3.11-slim
WORKDIR /srv
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip install --no-cache-dir .
COPY alembic.ini ./
COPY migrations ./migrations
ENV HOST=0.0.0.0 PORT=41242
EXPOSE 41242
CMD ["a2a-server", "serve"]
