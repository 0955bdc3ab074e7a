# streamkit with the example apps: `docker build -t streamkit .`, then e.g.
#   docker run --rm streamkit streamkit worker apps.pageviews --broker kafka://HOST:9092
# docker-compose.yml runs a Kafka broker, a page-view generator and workers (docs/docker.md).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The package and its dependencies first, so editing apps/ does not reinstall them.
# Built from a scratch directory that is removed: only the installed copy remains.
WORKDIR /tmp/streamkit-src
COPY pyproject.toml setup.cfg README.md ./
COPY streamkit ./streamkit
RUN pip install . && cd / && rm -rf /tmp/streamkit-src

# apps/ is not part of the installed package: keep it importable as `apps.*` from any directory.
COPY apps /opt/streamkit/apps
ENV PYTHONPATH=/opt/streamkit

# An unprivileged user owning only the state directory. The working directory is
# the state directory too, so the default broker (embedded://.streamkit) and the
# default --state-dir land in the volume rather than next to the code.
WORKDIR /var/lib/streamkit
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/streamkit --no-create-home streamkit \
    && chown streamkit:streamkit /var/lib/streamkit
VOLUME ["/var/lib/streamkit"]
USER streamkit

CMD ["streamkit", "--help"]
