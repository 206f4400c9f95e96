#!/usr/bin/env bash
# A one-node Slurm cluster on localhost for integration tests (docs/design.md §8, notes/toolchains.md).
#
#   scripts/slurm-test-cluster.sh start DIR   start munge (if not running), slurmctld, slurmd with
#                                             state under DIR; prints `export SLURM_CONF=…`
#   scripts/slurm-test-cluster.sh stop DIR    stop exactly the daemons that `start DIR` started
#   scripts/slurm-test-cluster.sh status DIR  exit 0 when the cluster answers and the node is up
#
# MXABLATE_SLURM_PORT_OFFSET=N moves the daemons' ports (two clusters at once); MXABLATE_SLURM_CPUS=N
# declares N CPUs on the node (default: nproc).
#
# Exit code 3 means the cluster cannot run here (not root, Slurm or munge not installed, a daemon
# would not start); the reason is the last line on stderr. Tests treat that as "skip".
set -uo pipefail

cannot() {
  echo "slurm-test-cluster: cannot start a Slurm cluster here: $1" >&2
  exit 3
}

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|status DIR" >&2; exit 2; }
mkdir -p "$dir" && dir=$(cd "$dir" && pwd)
conf="$dir/slurm.conf"
export SLURM_CONF="$conf"

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

node_up() {
  local state
  state=$(sinfo -h -N -o '%T' 2>/dev/null | head -n 1)
  [ "$state" = "idle" ] || [ "$state" = "mixed" ] || [ "$state" = "allocated" ]
}

stop_pidfile() {
  local pidfile=$1
  pid_alive "$pidfile" || { rm -f "$pidfile"; return 0; }
  local pid
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
  rm -f "$pidfile"
}

case "$cmd" in
  start)
    [ "$(id -u)" -eq 0 ] || cannot "it needs root (slurmd runs jobs as their submitting user)"
    for prog in slurmctld slurmd munged sinfo sbatch squeue scontrol scancel; do
      command -v "$prog" >/dev/null 2>&1 || [ -x "/usr/sbin/$prog" ] ||
        cannot "$prog is not installed (apt-get install slurm-wlm munge)"
    done
    export PATH="$PATH:/usr/sbin"
    mkdir -p "$dir/state" "$dir/spool" "$dir/log"

    # munge: reuse a daemon that answers on its socket; otherwise start one and remember that we
    # did (so `stop` ends it and nothing else).
    munge_socket=/run/munge/munge.socket.2
    if ! [ -S "$munge_socket" ]; then
      [ -f /etc/munge/munge.key ] || cannot "/etc/munge/munge.key is missing"
      mkdir -p /run/munge && chown munge:munge /run/munge
      runuser -u munge -- /usr/sbin/munged >>"$dir/log/munged.log" 2>&1 ||
        cannot "munged would not start (see $dir/log/munged.log)"
      # munged (running as munge) cannot write into DIR: record its pid ourselves.
      pgrep -n -x -u munge munged >"$dir/munged.pid"
      for _ in $(seq 1 50); do [ -S "$munge_socket" ] && break; sleep 0.1; done
      [ -S "$munge_socket" ] || cannot "munged started but $munge_socket did not appear"
    fi

    # MXABLATE_SLURM_CPUS declares more CPUs than the machine has (config_overrides makes slurmd
    # believe the configuration): tests with sleeping fake trainers can then observe Slurm's own
    # throttling (%K) rather than the machine's two cores.
    cpus=${MXABLATE_SLURM_CPUS:-$(nproc)}
    overrides=""
    [ "$cpus" -gt "$(nproc)" ] && overrides="SlurmdParameters=config_overrides"
    cat >"$conf" <<EOF
ClusterName=mxablate-test
SlurmctldHost=localhost
SlurmctldPort=$((6817 + ${MXABLATE_SLURM_PORT_OFFSET:-0} * 2))
SlurmdPort=$((6818 + ${MXABLATE_SLURM_PORT_OFFSET:-0} * 2))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SchedulerParameters=sched_interval=1
MessageTimeout=20
KillWait=5
$overrides
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
NodeName=localhost NodeHostname=$(hostname -s) NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    slurmctld -f "$conf" >>"$dir/log/start.log" 2>&1 || cannot "slurmctld would not start (see $dir/log/slurmctld.log)"
    slurmd -f "$conf" -N localhost >>"$dir/log/start.log" 2>&1 || cannot "slurmd would not start (see $dir/log/slurmd.log)"
    for _ in $(seq 1 150); do
      node_up && break
      sleep 0.2
    done
    node_up || {
      "$0" stop "$dir" >/dev/null 2>&1
      cannot "the node did not come up within 30 s (see $dir/log/)"
    }
    echo "export SLURM_CONF=$conf"
    ;;
  stop)
    stop_pidfile "$dir/slurmd.pid"
    stop_pidfile "$dir/slurmctld.pid"
    stop_pidfile "$dir/munged.pid"
    ;;
  status)
    pid_alive "$dir/slurmctld.pid" && pid_alive "$dir/slurmd.pid" && node_up
    ;;
  *)
    echo "usage: $0 start|stop|status DIR" >&2
    exit 2
    ;;
esac
