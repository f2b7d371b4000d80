#!/usr/bin/env bash
# Start a single-node Slurm for the integration tests: munge, MariaDB + slurmdbd (accounting), slurmctld,
# slurmd, and N fake GPUs (gres on character devices). No systemd, no cgroups. Installs Debian's packages
# first when they are missing. Every daemon's PID ends up in $MTP_SLURM_STATE (default /run/slurm-ci), where
# tests/slurm/stop.sh finds them.
#
#   tests/slurm/start.sh          exit 0: cluster up (sinfo idle, sacct answers)
#                                 exit 3: Slurm cannot run here (not root, no apt-get, no package mirror):
#                                         the reason is on stderr (and in $MTP_SLURM_REASON_FILE when set)
#                                 exit 1: something failed while installing or starting (see the logs)
# Environment: MTP_SLURM_STATE (state dir), MTP_SLURM_GPUS (fake GPUs, default 4), MTP_SLURM_INSTALL=0 (never
# apt-get), MTP_SLURM_LOGDIR (daemon logs, default /var/log/slurm).
set -euo pipefail

STATE=${MTP_SLURM_STATE:-/run/slurm-ci}
GPUS=${MTP_SLURM_GPUS:-4}
LOGDIR=${MTP_SLURM_LOGDIR:-/var/log/slurm}
CLUSTER=ci
ACCOUNT=ci
DB_PASS=mtp-ci-slurmdbd
export DEBIAN_FRONTEND=noninteractive
now_ms() { echo $(( ${EPOCHREALTIME/./} / 1000 )); }
T0=$(now_ms)

log() { local d=$(( $(now_ms) - T0 )); printf '[slurm-ci start %3d.%01ds] %s\n' $((d / 1000)) $((d % 1000 / 100)) "$*" >&2; }
unavailable() {
    log "unavailable: $*"
    echo "$*" >"${MTP_SLURM_REASON_FILE:-/dev/null}" 2>/dev/null || true
    exit 3
}
die() { log "FAILED: $*"; exit 1; }
# wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND every 0.1 s
wait_for() {
    local limit=$1 what=$2; shift 2
    local end=$(( $(date +%s) + limit ))
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$end" ] || die "timed out after ${limit}s waiting for $what"
        sleep 0.1
    done
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# ---- 0. can Slurm run here at all? -------------------------------------------------------------------------
[ "$(id -u)" = 0 ] || unavailable "not root (the daemons need root; run 'sudo make test-slurm')"
need=(slurmctld slurmd slurmdbd sbatch srun sacct sacctmgr munged mariadbd mariadb)
missing() { local b; for b in "${need[@]}"; do PATH=$PATH:/usr/sbin command -v "$b" >/dev/null || return 0; done; return 1; }
export PATH=$PATH:/usr/sbin:/sbin
mkdir -p "$STATE"

# ---- 1. install (only when missing) -------------------------------------------------------------------------
if missing; then
    [ "${MTP_SLURM_INSTALL:-1}" != 0 ] || unavailable "Slurm is not installed and MTP_SLURM_INSTALL=0"
    command -v apt-get >/dev/null || unavailable "Slurm is not installed and there is no apt-get (Debian/Ubuntu only)"
    log "installing slurm-wlm munge slurmdbd mariadb-server (apt-get, --no-install-recommends)"
    # Until step 3 writes the real one, a provisional slurm.conf (not a dpkg conffile) makes the clients give up
    # at once: without any, a client (the slurm executor plugin's `scontrol show config` in every snakemake call)
    # looks the controller up through DNS SRV records, which can take many seconds.
    [ -e /etc/slurm/slurm.conf ] || { mkdir -p /etc/slurm && printf '%s\n' "ClusterName=$CLUSTER" \
        SlurmctldHost=localhost MessageTimeout=1 >/etc/slurm/slurm.conf; }
    apt-get update -qq >"$STATE/apt.log" 2>&1 || unavailable "apt-get update failed (no package mirror?): $(tail -1 "$STATE/apt.log")"
    apt-get install -y -qq --no-install-recommends slurm-wlm munge slurmdbd mariadb-server >>"$STATE/apt.log" 2>&1 \
        || die "apt-get install failed: see $STATE/apt.log"
    missing && die "installed, but still missing one of: ${need[*]}"
    log "installed"
fi

# ---- 2. directories ---------------------------------------------------------------------------------------
mkdir -p "$STATE" /etc/slurm /var/spool/slurmctld /var/spool/slurmd "$LOGDIR" /run/munge /run/mysqld
chown munge:munge /run/munge && chmod 0755 /run/munge
chown slurm:slurm /var/spool/slurmctld "$LOGDIR"
chown mysql:mysql /run/mysqld

# ---- 3. slurm.conf (before any Slurm client call; sized from the hardware so the node never drains) --------
read -r CPUS MEM < <(slurmd -C | head -1 | sed -E 's/.*CPUs=([0-9]+).*RealMemory=([0-9]+).*/\1 \2/')
MEM=$(( MEM * 9 / 10 ))
# The node offers MTP_SLURM_OVERSUBSCRIBE (default 2) CPUs per core (SlurmdParameters=config_overrides): the CI
# jobs spend much of their life starting Python and waiting on Snakemake's status checks, not computing.
CPUS=$(( CPUS * ${MTP_SLURM_OVERSUBSCRIBE:-2} ))
GRES_NODE=""
GRES_LINES=""
rm -f /etc/slurm/gres.conf
if [ "$GPUS" -gt 0 ]; then
    for ((i = 0; i < GPUS; i++)); do
        [ -c "$STATE/fakegpu$i" ] || { rm -f "$STATE/fakegpu$i"; mknod "$STATE/fakegpu$i" c 1 3; }
    done
    echo "Name=gpu File=$STATE/fakegpu[0-$((GPUS - 1))]" >/etc/slurm/gres.conf
    GRES_NODE="Gres=gpu:$GPUS"
    GRES_LINES=$'GresTypes=gpu\nAccountingStorageTRES=gres/gpu'
fi
cat >/etc/slurm/slurm.conf <<EOF
# Written by mtp-repro tests/slurm/start.sh: a single-node CI cluster (accounting, $GPUS fake GPUs).
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStoreFlags=job_comment
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
MinJobAge=600
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
AuthInfo=cred_expire=10
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmdParameters=config_overrides
DefMemPerCPU=1024
ReturnToService=2
MpiDefault=none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
Waittime=0
# Clients give up after 1 s when no controller answers (otherwise every snakemake call with the slurm
# executor plugin installed waits ~9 s on 'scontrol show config' once the daemons are stopped).
MessageTimeout=${MTP_SLURM_MESSAGE_TIMEOUT:-1}
$GRES_LINES
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM $GRES_NODE State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
log "slurm.conf: CPUs=$CPUS RealMemory=$MEM GPUs=$GPUS"

# ---- 4. munge -------------------------------------------------------------------------------------------
if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
fi
if ! munge -n >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged
    wait_for 5 munged sh -c 'munge -n | unmunge'
    cp /run/munge/munged.pid "$STATE/munged.pid"
fi
log "munge up"

# ---- 5. MariaDB, then slurmdbd ----------------------------------------------------------------------------
if ! mysqladmin ping >/dev/null 2>&1; then
    /usr/sbin/mariadbd --user=mysql --skip-networking --pid-file=/run/mysqld/mysqld.pid \
        --socket=/run/mysqld/mysqld.sock >"$LOGDIR/mariadb.log" 2>&1 &
    wait_for 20 mariadbd mysqladmin ping
    wait_for 5 "mariadbd pid file" test -s /run/mysqld/mysqld.pid
    cp /run/mysqld/mysqld.pid "$STATE/mariadbd.pid"
fi
mariadb -uroot <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
EOF
log "mariadb up"
# slurmctld -c restarts job ids at 1, but slurmdbd keeps the jobs of earlier runs: continue after the highest
# recorded id so that `sacct -j <id>` never finds an older job of the same id.
last_id=$(mariadb -uroot -N slurm_acct_db -e "SELECT COALESCE(MAX(id_job), 0) FROM ${CLUSTER}_job_table" 2>/dev/null || echo 0)
echo "FirstJobId=$(( ${last_id:-0} + 1 ))" >>/etc/slurm/slurm.conf
cat >/etc/slurm/slurmdbd.conf <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=slurm
PidFile=$STATE/slurmdbd.pid
LogFile=$LOGDIR/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=$DB_PASS
EOF
chown slurm:slurm /etc/slurm/slurmdbd.conf && chmod 600 /etc/slurm/slurmdbd.conf
if ! pid_alive "$STATE/slurmdbd.pid"; then
    /usr/sbin/slurmdbd
fi
wait_for 20 "slurmdbd on port 6819" port_open 6819
log "slurmdbd up"

# ---- 6. controller and node --------------------------------------------------------------------------------
if pid_alive "$STATE/slurmctld.pid"; then
    scontrol reconfigure
else
    /usr/sbin/slurmctld -c
fi
pid_alive "$STATE/slurmd.pid" || /usr/sbin/slurmd -N localhost
node_idle() { sinfo -h -o %T 2>/dev/null | grep -qx idle; }
end=$(( $(date +%s) + 20 ))
until node_idle; do
    if [ "$(date +%s)" -ge "$end" ]; then
        sinfo -N -l >&2 || true
        tail -n 5 "$LOGDIR/slurmctld.log" "$LOGDIR/slurmd.log" >&2 || true
        die "node did not become idle within 20 s"
    fi
    sleep 0.1
done
log "slurmctld + slurmd up, node idle"

# ---- 7. accounting objects: cluster, account 'ci', the invoking user's association ----------------------------
USERS="root ${SUDO_USER:-}"
sacctmgr -i add cluster "$CLUSTER" >/dev/null 2>&1 || true
sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" Description=ci Organization=ci >/dev/null 2>&1 || true
for u in $USERS; do sacctmgr -i add user "$u" Account="$ACCOUNT" >/dev/null 2>&1 || true; done
wait_for 20 "sacct" sacct -X -n
wait_for 20 "association of root with account $ACCOUNT" \
    sh -c "sacctmgr -n -P show assoc user=root account=$ACCOUNT format=account | grep -qx $ACCOUNT"
log "accounting ready (cluster $CLUSTER, account $ACCOUNT); $(sinfo -h -o '%P %a %D %T %G')"
