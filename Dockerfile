# One image for every service role (api, worker, reaper, migrate); the command picks the role.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app

WORKDIR /app

# torch first, pinned, from the CPU wheel index: an unpinned torch pulls a multi-GB CUDA build.
# The project pins torch==2.13.0, which the installed 2.13.0+cpu satisfies, so pip keeps it.
RUN pip install "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu

# Dependencies change less often than the code: install them in their own layer.
COPY pyproject.toml README.md ./
COPY collapipe_core/__init__.py collapipe_core/__init__.py
RUN pip install . && pip uninstall -y collapipe

COPY . .
RUN pip install --no-deps . \
    && useradd --create-home --uid 10001 collapipe \
    && mkdir -p /data/artifacts \
    && chown -R collapipe /data/artifacts

USER collapipe
ENV COLLAPIPE_ARTIFACT_DIR=/data/artifacts
EXPOSE 8000

# The api by default; docker-compose.yml overrides the command for worker, reaper and migrate.
CMD ["collapipe", "serve", "--host", "0.0.0.0", "--port", "8000"]
