#!/bin/sh
# cron wrapper for `ground run`: retries a run that stopped early, alerts on the rest.
#
# crontab (crontab -e), every night at 02:15; cron mails whatever this prints:
#   15 2 * * *  /opt/ground/jobs/scheduling/ground-cron.sh /opt/ground/jobs/nightly.toml
#
# cron's environment is nearly empty: the key comes from a file only this user can read
# (one line: GEMINI_API_KEY=...), and PATH must reach the virtualenv.
set -u
JOB=${1:?usage: ground-cron.sh JOB.toml}
STATE_DIR=${GROUND_STATE_DIR:-/var/lib/ground}
RETRIES=${GROUND_RETRIES:-3}         # extra attempts after a run that stopped early (status 1)
RETRY_DELAY_S=${GROUND_RETRY_DELAY_S:-900}
set -a; . "${GROUND_ENV_FILE:-$HOME/.config/ground/env}"; set +a
PATH=/opt/ground/.venv/bin:$PATH

attempt=0
while :; do
  ground run "$JOB" --log-format json \
    --summary-json "$STATE_DIR/summary.json" \
    --metrics-textfile /var/lib/node_exporter/textfile/ground.prom \
    >>"$STATE_DIR/run.log" 2>&1
  status=$?
  case $status in
    0) exit 0 ;;
    3) echo "ground: $JOB finished, but some questions failed (data is good):"
       grep -A3 '"failures"' "$STATE_DIR/summary.json"
       exit 3 ;;
    1) attempt=$((attempt + 1))
       if [ "$attempt" -gt "$RETRIES" ]; then
         echo "ground: $JOB stopped early $attempt times; see $STATE_DIR/run.log"
         exit 1
       fi
       sleep "$RETRY_DELAY_S" ;;
    *) echo "ground: $JOB could not run (status $status: a bad job file?); see $STATE_DIR/run.log"
       exit "$status" ;;
  esac
done
