#!/usr/bin/env bash
# Stop the daemons that tests/slurm/start.sh started, each by the PID file in $MTP_SLURM_STATE, in reverse
# start order: SIGTERM, poll every 0.1 s for up to 10 s, then SIGKILL. Daemons without a PID file there (not
# started by start.sh) are left alone. Safe to run twice; exits 0 unless a process survived SIGKILL.
set -uo pipefail

STATE=${MTP_SLURM_STATE:-/run/slurm-ci}
now_ms() { echo $(( ${EPOCHREALTIME/./} / 1000 )); }
T0=$(now_ms)
log() { local d=$(( $(now_ms) - T0 )); printf '[slurm-ci stop %3d.%01ds] %s\n' $((d / 1000)) $((d % 1000 / 100)) "$*" >&2; }

[ -d "$STATE" ] || exit 0
rc=0
# stop_group NAME...: SIGTERM to every named daemon at once, wait up to 10 s for all, SIGKILL what is left.
# Groups run in reverse start order; within a group the daemons do not need each other to shut down.
stop_group() {
    local name f pid pids=() names=()
    for name in "$@"; do
        f="$STATE/$name.pid"
        [ -s "$f" ] || continue
        pid=$(cat "$f")
        if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null && pids+=("$pid") && names+=("$name")
        else
            rm -f "$f"
        fi
    done
    [ ${#pids[@]} -gt 0 ] || return 0
    local i alive
    for _ in $(seq 100); do
        alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ $alive = 1 ] || break
        sleep 0.1
    done
    for i in "${!pids[@]}"; do
        pid=${pids[$i]} name=${names[$i]}
        if kill -0 "$pid" 2>/dev/null; then
            log "$name ($pid) ignored SIGTERM for 10 s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            if kill -0 "$pid" 2>/dev/null; then log "$name ($pid) survived SIGKILL"; rc=1; continue; fi
        fi
        rm -f "$STATE/$name.pid"
        log "$name ($pid) stopped"
    done
}
stop_group slurmd slurmctld   # node and controller
stop_group slurmdbd           # after slurmctld, which sends its last records to slurmdbd
stop_group mariadbd munged    # the database of slurmdbd; munge, which every Slurm daemon needed until now
exit $rc
