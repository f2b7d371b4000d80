#!/usr/bin/env bash
# Run a command (the test suite) with the single-node CI Slurm of tests/slurm/start.sh up, and stop its daemons
# afterwards, also when the command fails or is interrupted:
#   tests/slurm/with_cluster.sh --background .venv/bin/pytest          (make test)
#   tests/slurm/with_cluster.sh .venv/bin/pytest -m slurm tests/slurm  (make test-slurm)
# --background: install (when missing) and start the cluster while the command already runs; the Slurm tests
#   (which tests/conftest.py runs last) wait for it. This hides the ~20-40 s of apt-get and start
#   behind the unit tests. Without it, the cluster is up before the command starts.
# Where Slurm cannot run (not root, no apt-get, no mirror, ...) the command still runs and the Slurm tests skip
# with the reason. A cluster that already answers is used as it is; one that another with_cluster.sh started is
# stopped by the last of them to finish (flock on $MTP_SLURM_STATE.lock), one started by hand is left running.
#   MTP_SLURM=off         do not start (or install) anything; the Slurm tests skip
#   MTP_SLURM_REQUIRED=1  a cluster that cannot start is an error, and so is a skipped Slurm test
# The daemons stay up until the command ends: with the slurm executor plugin installed, every snakemake call would
# otherwise ask a dead controller for its config (start.sh also sets MessageTimeout=1, so that
# such a call loses < 1 s rather than ~9 s).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
STATE=${MTP_SLURM_STATE:-/run/slurm-ci}
export PATH=$PATH:/usr/sbin:/sbin
now_ms() { echo $(( ${EPOCHREALTIME/./} / 1000 )); }
secs() { local d=$(( $(now_ms) - $1 )); printf '%d.%01d' $((d / 1000)) $((d % 1000 / 100)); }
say() { echo "[slurm-ci] $*" >&2; }

background=0
if [ "${1:-}" = --background ]; then background=1; shift; fi

# Two locks on one file each: "start" (exclusive) around checking/starting/stopping the cluster, and "users"
# (shared) held while the command runs, so that the last user of a wrapper-started cluster stops it.
locking=0
if [ "${MTP_SLURM:-on}" != off ] && touch "$STATE.start.lock" "$STATE.users.lock" 2>/dev/null; then
    exec 8>>"$STATE.start.lock" 9>>"$STATE.users.lock" && locking=1
fi
bg_pid="" tmp=$(mktemp -d)
cleanup() {
    if [ -n "$bg_pid" ]; then
        # never stop half-way through apt-get or a daemon start: wait for start.sh first
        wait "$bg_pid" 2>/dev/null
        sed 's/^/  /' "$tmp/start.log" >&2
    fi
    if [ "$locking" = 1 ]; then
        exec 8>>"$STATE.start.lock" && flock -x 8   # no wrapper starts or joins meanwhile
        # the last user (no other shared holder) of a cluster that a wrapper started stops it
        if [ -e "$STATE/managed" ] && flock -x -n 9; then
            local t=$(now_ms)
            "$HERE/stop.sh" 8>&- 9>&- && rm -f "$STATE/managed"
            say "stopped in $(secs "$t") s"
        elif [ -e "$STATE/managed" ]; then
            say "another with_cluster.sh still uses the cluster: it stops it"
        fi
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

unavailable_reason() {  # start.sh's exit status -> the reason the Slurm tests skip with
    case $1 in
        3) cat "$tmp/reason" 2>/dev/null || echo "tests/slurm/start.sh: Slurm cannot run here" ;;
        *) echo "tests/slurm/start.sh failed (exit $1); its log: ${MTP_SLURM_LOGDIR:-/var/log/slurm}, $tmp/start.log" ;;
    esac
}

if [ "${MTP_SLURM:-on}" = off ]; then
    export MTP_SLURM_UNAVAILABLE="MTP_SLURM=off"
else
    [ "$locking" = 1 ] && flock -x 8 && flock -s 9
    if command -v sinfo >/dev/null && sinfo -h -o %P 2>/dev/null | grep -qx 'debug\*\?'; then
        if [ -e "$STATE/managed" ]; then say "joining the cluster another with_cluster.sh started"
        else say "a Slurm controller already answers: using it as it is (not stopped afterwards)"; fi
    elif [ "$(id -u)" = 0 ] && [ "$locking" = 0 ]; then
        export MTP_SLURM_UNAVAILABLE="cannot open $STATE.start.lock"
    elif [ "$background" = 1 ]; then
        t=$(now_ms)
        # the subshell keeps the start lock (fd 8) until start.sh is done (the daemons it starts get no copy of
        # fd 8 or 9, or the locks would live as long as they do); we let go of our copy below
        ( [ "$(id -u)" = 0 ] && mkdir -p "$STATE" && touch "$STATE/managed"
          MTP_SLURM_REASON_FILE=$tmp/reason "$HERE/start.sh" >"$tmp/start.log" 2>&1 8>&- 9>&-
          rc=$?
          echo "[slurm-ci] start.sh exited $rc after $(secs "$t") s (in the background)" >>"$tmp/start.log"
          echo "$rc" >"$tmp/status.tmp" && mv "$tmp/status.tmp" "$tmp/status" ) &
        bg_pid=$!
        # read by the slurm_cluster fixture: it waits for the status, then skips with the reason if it is not 0
        export MTP_SLURM_START_STATUS=$tmp/status MTP_SLURM_START_LOG=$tmp/start.log MTP_SLURM_START_REASON=$tmp/reason
        say "starting the cluster in the background (log: $tmp/start.log)"
    else
        t=$(now_ms)
        [ "$(id -u)" = 0 ] && mkdir -p "$STATE" && touch "$STATE/managed"   # stop what it starts, even half-way
        MTP_SLURM_REASON_FILE=$tmp/reason "$HERE/start.sh" 8>&- 9>&-   # daemons must not inherit the locks
        rc=$?
        if [ "$rc" = 0 ]; then
            say "cluster up in $(secs "$t") s (install included when it was missing)"
        else
            export MTP_SLURM_UNAVAILABLE
            MTP_SLURM_UNAVAILABLE=$(unavailable_reason "$rc")
            say "no cluster: $MTP_SLURM_UNAVAILABLE"
            [ "${MTP_SLURM_REQUIRED:-0}" = 1 ] && { say "MTP_SLURM_REQUIRED=1: stopping"; exit 1; }
        fi
    fi
    [ "$locking" = 1 ] && exec 8>&-   # release the start lock (the background start holds its own copy)
fi

t=$(now_ms)
"$@" 9>&-   # the shared lock stays with this script, not with what the command leaves behind
rc=$?
say "'$*' exited $rc after $(secs "$t") s"
exit $rc
