#!/usr/bin/env bash
# The durable-workflow benchmarks in one sitting on one PostgreSQL (README,
# "Several replicas on one PostgreSQL"): svc's file journal over HTTP and in
# process, the PostgreSQL engine in process and with 1 and 2 `svc serve`
# replicas, the takeover time, and DBOS Transact Go (bench/dbos).
#
#   bench/run.sh [COUNT]     # from the repository's root; COUNT repeats (default 3)
#
# Without SVC_DATABASE_URL it starts a throwaway cluster of the local
# PostgreSQL server binaries with the server's defaults (fsync and
# synchronous_commit on), as the postgres user when run as root, and stops
# it at the end. Output: bench/out/*.txt.
set -euo pipefail
count=${1:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/bench/out
mkdir -p "$out"

if [ -z "${SVC_DATABASE_URL:-}" ]; then
  data=$(mktemp -d /tmp/svc-bench-pg.XXXXXX)
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 55432)
  as=()
  if [ "$(id -u)" = 0 ]; then
    chown postgres "$data"
    as=(runuser -u postgres --)
  fi
  "${as[@]}" initdb -D "$data/db" -U postgres --auth=trust >/dev/null
  "${as[@]}" pg_ctl -D "$data/db" -l "$data/log" -w \
    -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$data -c max_connections=300" start >/dev/null
  trap '"${as[@]}" pg_ctl -D "$data/db" -m fast stop >/dev/null; rm -rf "$data"' EXIT
  export SVC_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
fi
echo "PostgreSQL: $(psql "$SVC_DATABASE_URL" -Atc 'SELECT version()' | cut -d' ' -f1,2); $(uptime)" | tee "$out/sitting.txt"

cd "$root"
go test -c -o "$out/svc.test" . >/dev/null
(cd bench/dbos && go build -o "$out/dbosbench" .)
for i in $(seq "$count"); do
  echo "== round $i $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')" | tee -a "$out/sitting.txt"
  "$out/svc.test" -test.run '^$' -test.bench 'Workflows|EngineInProcess|Replicas/replicas' -test.benchtime=1x 2>&1 | tee -a "$out/svc.txt" | grep -E '^Benchmark' || true
  psql "$SVC_DATABASE_URL" -qc 'DROP DATABASE IF EXISTS dbos_bench WITH (FORCE)' -c 'CREATE DATABASE dbos_bench'
  DBOS_BENCH_DATABASE_URL=$(echo "$SVC_DATABASE_URL" | sed 's#/postgres?#/dbos_bench?#') "$out/dbosbench" 2>&1 | tee -a "$out/dbos.txt"
done
"$out/svc.test" -test.run '^$' -test.bench 'Replicas/takeover' -test.benchtime=1x -test.v 2>&1 | tee -a "$out/takeover.txt" | grep -E '^Benchmark|takeovers' || true
