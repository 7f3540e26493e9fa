#!/bin/bash
# Hand checks: ElasticJob 3.0.4 (J) and shardjob (S) instances on one ZooKeeper namespace,
# a job of 4 items every 5 s (build.sh first). Every run is logged by the job's script.
#
#   ZK=127.0.0.1:2181 SJ=target/release/shardjob scripts/elasticjob-check/exp.sh SCENARIO
#
#   join     S joins the Java-led job 8 times, 0.5 to 3.5 s before a fire, leaves with SIGTERM
#   kill-s   J and S; S killed (-9) mid-run and started again, 3 times
#   kill-j   J and S; J killed (-9) mid-run and started again, 3 times
#   roll     J, J -> S, S -> J, J: one SIGTERM and one kill -9 each way
#   compat   shardjob writes compat.yaml's jobs; 3.0.4's and 3.0.5's JobConfigurationPOJO read them
#
# BASE=1 runs the same with Java instances in the shardjob instances' places (ElasticJob's own
# behaviour, to compare). Logs and runs.log in $EJ/out/SCENARIO[-base]; count.py and kills.py
# read runs.log. Only the processes this script starts are signalled, by PID.
set -u
ZK=${ZK:-127.0.0.1:2181}; SJ=${SJ:?the shardjob binary (built with --features zk)}
E=${EJ:-${TMPDIR:-/tmp}/shardjob-ej-check}
NS="exp-$1-$(date +%s)"; OUT=$E/out/$1${BASE:+-base}; rm -rf $OUT; mkdir -p $OUT; : > $E/runs.log
CP="$E/harness:$E/classes:$(cat $E/cp.txt)"
declare -A PIDS
ev() { echo "$(date +%s%3N) EXP - $*" >> $E/runs.log; echo "$(date +%T.%3N) $*"; }
startj() { EXP_WHO=$1 setsid java -cp "$CP" ExpMain run $ZK $NS exp $E/job.sh > $OUT/$1.log 2>&1 & PIDS[$1]=$!; ev start $1 pid ${PIDS[$1]}; }
starts() { if [ -n "${BASE:-}" ]; then startj $1; return; fi; EXP_WHO=$1 RUST_LOG=info setsid $SJ run $E/jobs.yaml --registry "zk://$ZK/$NS?session_timeout_ms=10000" > $OUT/$1.log 2>&1 & PIDS[$1]=$!; ev start $1 pid ${PIDS[$1]}; }
# wait until 700 ms after the next fire (fires every 5 s)
midrun() { local ms=$(( $(date +%s%3N) % 5000 )); local w=$(( (5700 - ms) % 5000 )); [ $w -lt 100 ] && w=$((w+5000)); sleep $(printf '%d.%03d' $((w/1000)) $((w%1000))); }
kill9() { midrun; kill -9 ${PIDS[$1]}; ev kill-9 $1; unset "PIDS[$1]"; }
term() { midrun; kill -TERM ${PIDS[$1]}; ev sigterm $1; }
stopall() { for k in "${!PIDS[@]}"; do kill -TERM ${PIDS[$k]} 2>/dev/null; done; sleep 12; for k in "${!PIDS[@]}"; do kill -9 ${PIDS[$k]} 2>/dev/null; done; }
api() { java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$CP" ExpMain api $ZK $NS > $OUT/api-$1.txt 2>&1; ev "api $1 rc $? $(grep -c '^job ' $OUT/api-$1.txt) jobs"; }
case $1 in
compat)
  $SJ run $E/compat.yaml --registry "zk://$ZK/$NS" > $OUT/compat-run.log 2>&1 & P=$!
  sleep 6; kill -TERM $P; wait $P
  java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$E/harness:$E/classes:$E/v305/classes:$(cat $E/cp.txt)" \
    ReadConfigs $ZK $NS 2>&1 | grep -v '^\[' | tee $OUT/read.txt
  exit 0 ;;
kill-s|kill-j)
  startj J1; sleep 8; starts S1; sleep 25; api mixed
  for r in 1 2 3; do
    if [ $1 = kill-s ]; then v=S$r; nxt=S$((r+1)); kill9 $v; sleep 30; starts $nxt
    else v=J$r; nxt=J$((r+1)); kill9 $v; sleep 30; startj $nxt; fi
    sleep 25
  done ;;
join)
  # shardjob instances join the Java-led job at set offsets before a fire and leave with SIGTERM
  startj J1; sleep 10
  n=0; for off in 500 1500 2500 3500 500 1500 2500 3500; do
    n=$((n+1)); ms=$(( $(date +%s%3N) % 5000 )); w=$(( (10000 - off - ms) % 5000 )); [ $w -lt 200 ] && w=$((w+5000))
    sleep $(printf '%d.%03d' $((w/1000)) $((w%1000))); starts S$n; sleep 12; kill -TERM ${PIDS[S$n]}; ev sigterm S$n; sleep 11; unset "PIDS[S$n]"
  done ;;
roll)
  startj J1; sleep 3; startj J2; sleep 25; api java
  term J1; starts S1; sleep 25
  kill9 J2; starts S2; sleep 35; api rust
  term S1; startj J3; sleep 25
  kill9 S2; startj J4; sleep 35; api java-again ;;
esac
ev end; stopall; cp $E/runs.log $OUT/runs.log
