#!/bin/sh
# cron wrapper for `ground run`: retries a run that stopped early, alerts on the rest.
#
# crontab (crontab -e), every night at 02:15; cron mails whatever this prints:
#   15 2 * * *  /opt/ground/jobs/scheduling/ground-cron.sh /opt/ground/jobs/nightly.toml
# Anything after the job file goes to `ground run` as it is, e.g. `--set limits.budget_usd=20`.
#
# cron's environment is nearly empty: the key comes from a file only this user can read
# (one line: GEMINI_API_KEY=...; a missing file is fine when the key is not needed, e.g.
# Vertex AI with GOOGLE_APPLICATION_CREDENTIALS), and PATH must reach the virtualenv.
#
# Settings (environment variables; the defaults suit a checkout in /opt/ground):
#   GROUND_BIN           the directory holding `ground`           (/opt/ground/.venv/bin)
#   GROUND_STATE_DIR     run.log and summary.json; created        (/var/lib/ground)
#   GROUND_ENV_FILE      KEY=value lines sourced before the run   ($HOME/.config/ground/env)
#   GROUND_TEXTFILE_DIR  where the metrics go, as ground-JOB.prom: point node_exporter's
#                        --collector.textfile.directory here, or this at its directory
#                        (which must exist)                       ($GROUND_STATE_DIR)
#   GROUND_RETRIES       extra attempts after a run that stopped early (exit 1)   (3)
#   GROUND_RETRY_DELAY_S seconds between them                                     (900)
set -u
JOB=${1:?usage: ground-cron.sh JOB.toml [ground run flags ...]}
shift
NAME=$(basename "$JOB" .toml)
GROUND_BIN=${GROUND_BIN:-/opt/ground/.venv/bin}
STATE_DIR=${GROUND_STATE_DIR:-/var/lib/ground}
ENV_FILE=${GROUND_ENV_FILE:-$HOME/.config/ground/env}
TEXTFILE_DIR=${GROUND_TEXTFILE_DIR:-$STATE_DIR}
RETRIES=${GROUND_RETRIES:-3}
RETRY_DELAY_S=${GROUND_RETRY_DELAY_S:-900}
PATH=$GROUND_BIN:$PATH

mkdir -p "$STATE_DIR" || { echo "ground: cannot create $STATE_DIR"; exit 2; }
LOG=$STATE_DIR/$NAME.log
SUMMARY=$STATE_DIR/$NAME.summary.json
if [ -f "$ENV_FILE" ]; then
  set -a; . "$ENV_FILE"; set +a
fi

attempt=0
while :; do
  ground run "$JOB" --log-format json --summary-json "$SUMMARY" \
    --metrics-textfile "$TEXTFILE_DIR/ground-$NAME.prom" "$@" >>"$LOG" 2>&1
  status=$?
  case $status in
    0) exit 0 ;;
    3) echo "ground: $JOB finished, but some questions failed (the data stored is good):"
       grep -A3 '"failures"' "$SUMMARY"
       exit 3 ;;
    1) attempt=$((attempt + 1))
       if [ "$attempt" -gt "$RETRIES" ]; then
         echo "ground: $JOB stopped early $attempt times; see $LOG"
         exit 1
       fi
       sleep "$RETRY_DELAY_S" ;;
    *) echo "ground: $JOB needs an edit (status $status: the job file, a flag, the question file or the key); see $LOG"
       tail -n 3 "$LOG"
       exit "$status" ;;
  esac
done
