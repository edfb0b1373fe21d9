# The `ground` command in a container, for the Kubernetes example (jobs/scheduling/):
#   docker build -t ground:0.1.0 .
#   docker run --rm -e GEMINI_API_KEY -v "$PWD/work:/data" ground:0.1.0 run /data/job.toml
# (Not built by this repository's tests: nothing there can build images.)
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/ground/.venv/bin:$PATH

# Installed editable from a copy of the checkout: the database migrations (migrations/) are
# found beside the package (pipeline/store/engine.py), as in a developer's checkout. The
# pins are requirements.lock's; the code is root's and read-only to the user that runs it.
WORKDIR /opt/ground
COPY pyproject.toml requirements.lock README.md ./
COPY pipeline ./pipeline
COPY migrations ./migrations
COPY jobs ./jobs
RUN python -m venv .venv \
    && .venv/bin/pip install --no-cache-dir --quiet -c requirements.lock -e . \
    && useradd --create-home --uid 10001 ground \
    && mkdir /data && chown ground:ground /data

USER ground
WORKDIR /data
ENTRYPOINT ["ground"]
CMD ["--help"]
