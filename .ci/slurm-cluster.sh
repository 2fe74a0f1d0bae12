#!/usr/bin/env bash
# A single-node SLURM cluster with accounting (slurmctld, slurmd, slurmdbd + MariaDB, munge;
# Debian packages) on localhost, all state under $ROOT. Used by the cluster tests
# (tests/servers/slurm.py) and by .ci/run; developers can start one by hand:
#   sudo ROOT=/tmp/slurm .ci/slurm-cluster.sh install     # apt packages, once
#   sudo ROOT=/tmp/slurm .ci/slurm-cluster.sh start       # then: export SLURM_CONF=/tmp/slurm/etc/slurm.conf
#   sudo ROOT=/tmp/slurm .ci/slurm-cluster.sh stop        # every daemon stopped by its pid
# Needs root; daemons run as root. Loopback only (ports 16817-16819 and 13306; override with
# PORT_BASE, DB_PORT). The node advertises CPUS (default 8) so a detached orchestrator and a few
# tiny trials fit next to each other on a 2-core machine.
set -euo pipefail
ROOT=${ROOT:?set ROOT to the folder that holds this cluster state}
ACCOUNTING=${ACCOUNTING:-1}
CPUS=${CPUS:-8}
PORT_BASE=${PORT_BASE:-16817}
# The first job id. JAX's SLURM auto-detection puts a job's jax.distributed coordinator on
# port 61440 + job id % 1024 of its first node, so two clusters on one machine that hand out
# the same ids (both from 1) put two multi-task trials on the same port, and the second's
# tasks abort the first's ("connected with a different incarnation"). tests/servers/slurm.py
# gives each concurrent test cluster its own block of 256 ids.
FIRST_JOB_ID=${FIRST_JOB_ID:-1}
CTLD_PORT=$PORT_BASE; SLURMD_PORT=$((PORT_BASE + 1)); DBD_PORT=$((PORT_BASE + 2)); DB_PORT=${DB_PORT:-13306}
export SLURM_CONF=$ROOT/etc/slurm.conf
RUN=$ROOT/run

ms() { echo $(( ($(date +%s%N) - T0) / 1000000 )); }

install() {
  apt-get update -qq
  pkgs="munge slurmctld slurmd slurm-client"
  [ "$ACCOUNTING" = 1 ] && pkgs="$pkgs slurmdbd mariadb-server"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs
}

write_conf() {
  mkdir -p $ROOT/{etc,state,spool,log,run,munge,mysql}
  chmod 700 $ROOT/munge; chmod 755 $ROOT $ROOT/run
  [ -f $ROOT/munge/munge.key ] || { dd if=/dev/urandom of=$ROOT/munge/munge.key bs=1024 count=1 status=none; chmod 400 $ROOT/munge/munge.key; }
  local acct="AccountingStorageType=accounting_storage/none"
  if [ "$ACCOUNTING" = 1 ]; then
    acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$RUN/munge.socket"
  fi
  cat > $SLURM_CONF <<EOF
ClusterName=ci
FirstJobId=$FIRST_JOB_ID
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$RUN/munge.socket,cred_expire=10
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=$ROOT/state
SlurmdSpoolDir=$ROOT/spool
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$ROOT/log/slurmctld.log
SlurmdLogFile=$ROOT/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
$acct
JobCompType=jobcomp/none
ReturnToService=2
JobRequeue=1
SlurmdParameters=config_overrides
MinJobAge=300
KillWait=5
SlurmdTimeout=30
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=20000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
  cat > $ROOT/etc/slurmdbd.conf <<EOF
AuthType=auth/munge
AuthInfo=socket=$RUN/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$ROOT/log/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
EOF
  chmod 600 $ROOT/etc/slurmdbd.conf   # slurmdbd is read from dirname($SLURM_CONF)
}

wait_for() { # cmd timeout_s
  local i; for i in $(seq 1 $(( $2 * 10 ))); do eval "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "timeout waiting for: $1" >&2; return 1
}

start() {
  write_conf
  T0=$(date +%s%N)
  munged --key-file=$ROOT/munge/munge.key --socket=$RUN/munge.socket --pid-file=$RUN/munged.pid \
         --log-file=$ROOT/log/munged.log --seed-file=$ROOT/munge/munged.seed
  wait_for "munge -n --socket=$RUN/munge.socket" 10; echo "munged up: $(ms) ms"
  if [ "$ACCOUNTING" = 1 ]; then
    if [ ! -d $ROOT/mysql/mysql ]; then
      mariadb-install-db --user=root --datadir=$ROOT/mysql --skip-test-db > $ROOT/log/mariadb-install.log 2>&1
    fi
    mariadbd --user=root --datadir=$ROOT/mysql --socket=$RUN/mysql.sock --pid-file=$RUN/mariadb.pid \
      --bind-address=127.0.0.1 --port=$DB_PORT --log-error=$ROOT/log/mariadb.err \
      --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900 </dev/null >/dev/null 2>&1 &
    wait_for "mariadb --socket=$RUN/mysql.sock -e 'select 1'" 30; echo "mariadb up: $(ms) ms"
    mariadb --socket=$RUN/mysql.sock -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
    slurmdbd
    wait_for "sacctmgr -n show cluster" 30; echo "slurmdbd up: $(ms) ms"
    sacctmgr -i add cluster ci >/dev/null 2>&1 || true
  fi
  slurmctld
  slurmd -N localhost
  wait_for "sinfo -h -o %T | grep -q idle" 60; echo "cluster idle: $(ms) ms"
  sinfo
}

stop() { # the jobs, then the daemons by pid, in reverse order
  local d p
  # Jobs first, while slurmd can end them: a test that failed may leave one running, and its
  # processes would outlive the daemons (the job's slurmstepd is not slurmd's child).
  if [ -f $RUN/slurmctld.pid ] && kill -0 "$(cat $RUN/slurmctld.pid)" 2>/dev/null; then
    local jobs; jobs=$(squeue -h -o %A 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      scancel --full $jobs 2>/dev/null || true
      for _ in $(seq 1 150); do [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.1; done
    fi
  fi
  for d in slurmd slurmctld slurmdbd mariadb munged; do
    [ -f $RUN/$d.pid ] || continue
    p=$(cat $RUN/$d.pid)
    if kill -0 "$p" 2>/dev/null; then
      kill "$p"; for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$p" 2>/dev/null && { echo "$d ($p) still alive, SIGKILL"; kill -9 "$p"; }
      echo "stopped $d ($p)"
    fi
    rm -f $RUN/$d.pid
  done
}

status() { for f in $RUN/*.pid; do p=$(cat $f); echo "$(basename $f .pid) $p $(kill -0 $p 2>/dev/null && echo alive || echo dead)"; done; }

"$@"
