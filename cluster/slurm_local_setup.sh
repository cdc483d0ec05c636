#!/usr/bin/env bash
# A single-node Slurm (slurmctld + slurmd + munged) in one folder, for testing cluster/slurm.sbatch
# on one machine (tests/test_slurm.py). Not for production: the daemons run as root, with no
# accounting database and no cgroups.
#
#   cluster/slurm_local_setup.sh start DIR   # installs slurm-wlm + munge with apt if missing (root),
#                                            # writes DIR/slurm.conf, starts the three daemons;
#                                            # then: export SLURM_CONF=DIR/slurm.conf; sbatch ...
#   cluster/slurm_local_setup.sh stop DIR    # stops the daemons started in DIR (by their PIDs)
#
# Everything lives in DIR (config, munge key and socket, state, logs, PID files); nothing under
# /etc is changed, so it stays apart from any Slurm or munge the machine already runs.
# Ports: SLURM_CTLD_PORT (default 6817) and SLURM_D_PORT (default 6818), on all interfaces.
set -euo pipefail

cmd=${1:?usage: slurm_local_setup.sh start|stop DIR}
dir=${2:?usage: slurm_local_setup.sh start|stop DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

fail() { echo "slurm_local_setup: $*" >&2; exit 1; }

stop_pid() {  # stop_pid FILE: TERM the daemon whose PID the file holds, wait up to 20 s
    local file=$1 pid
    [[ -s $file ]] || return 0
    pid=$(cat "$file")
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
    kill -KILL "$pid" 2>/dev/null || true
}

if [[ $cmd == stop ]]; then
    if [[ -s $dir/slurm.conf ]]; then  # slurmctld and slurmd shut down cleanly
        SLURM_CONF=$dir/slurm.conf timeout 20 scontrol shutdown >/dev/null 2>&1 || true
    fi
    stop_pid "$dir/run/slurmd-ns.pid"
    stop_pid "$dir/run/slurmctld.pid"
    stop_pid "$dir/munge/munged.pid"
    exit 0
fi
[[ $cmd == start ]] || fail "unknown command $cmd (valid: start, stop)"

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    [[ $(id -u) == 0 ]] || fail "slurm-wlm and munge are not installed, and installing them needs root"
    command -v apt-get >/dev/null || fail "slurm-wlm and munge are not installed, and there is no apt-get"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq slurm-wlm munge; } >"$dir/apt.log" 2>&1 \
        || fail "apt-get install slurm-wlm munge failed (see $dir/apt.log)"
fi
[[ $(id -u) == 0 ]] || fail "starting slurmd needs root"
PATH=$PATH:/usr/sbin:/sbin

# munge: its own key, socket, PID and log in DIR (munged checks that these are owner-only).
mkdir -p "$dir/munge" "$dir/run" "$dir/state/ctld" "$dir/state/d" "$dir/log"
chmod 700 "$dir" "$dir/munge"
if [[ ! -s $dir/munge/munge.key ]]; then
    (umask 077 && dd if=/dev/urandom of="$dir/munge/munge.key" bs=1 count=1024 status=none)
fi
socket=$dir/munge/munge.socket
munged --force --socket="$socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" \
    --log-file="$dir/munge/munged.log" || fail "munged did not start (see $dir/munge/munged.log)"

host=$(hostname -s)
cpus=$(nproc)
memory=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
cat >"$dir/slurm.conf" <<EOF
ClusterName=icl-local
SlurmctldHost=$host
SlurmctldPort=${SLURM_CTLD_PORT:-6817}
SlurmdPort=${SLURM_D_PORT:-6818}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$dir/state/ctld
SlurmdSpoolDir=$dir/state/d
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
# No cgroups: processes are tracked through /proc (containers and VMs often lack a usable
# cgroup hierarchy); no task binding, no accounting database (sacct needs slurmdbd).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
MinJobAge=3600
MpiDefault=none
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF

export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start (see $dir/log/slurmctld.log)"
# slurmd (and so every job) runs in its own PID namespace, as process 2 under a bash that
# reaps orphans: `ray symmetric-run` ends with `ray stop`, which stops every Ray process it can
# see on the machine; in the namespace it sees only the job's own. The PID file holds the
# namespace's outer process (unshare): stopping it kills everything inside.
command -v unshare >/dev/null || fail "no unshare (util-linux) to give slurmd its own PID namespace"
unshare --pid --fork --mount-proc --kill-child -- true 2>"$dir/log/unshare.err" \
    || fail "cannot create a PID namespace ($(head -n1 "$dir/log/unshare.err"))"
setsid unshare --pid --fork --mount-proc --kill-child -- \
    bash -c 'slurmd -D -f "$1" & wait $!' _ "$SLURM_CONF" \
    </dev/null >"$dir/log/slurmd.out" 2>&1 &
echo $! >"$dir/run/slurmd-ns.pid"
for _ in $(seq 60); do
    if sinfo -h -N -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
        echo "slurm_local_setup: node $host up ($cpus CPUs, $memory MB); SLURM_CONF=$SLURM_CONF"
        exit 0
    fi
    sleep 1
done
sinfo -N >&2 || true
fail "the node did not come up in 60 s (see $dir/log/)"
