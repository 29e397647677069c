#!/usr/bin/env bash
# The chaos suite, full length (docs/reliability.md): kill -9 of the server
# and of the bridge mid-exec, a full disk, a damaged state file, a slow
# policy write, a refusal flood, a lockout of every transport and hostile
# workspaces, each fault repeated ROUNDS times (default 50). Prints the
# table of records lost, commands run twice, requests unanswered, starts
# more open than before, commands that survived a lockout, requests of
# others refused and seconds to recover; exits non-zero if any count is not
# zero (rows marked KNOWN included). The full disk needs root (a small
# tmpfs).
#
# Then the fleet's round, ROUNDS times: three coily servers on a 3-member
# etcd cluster, members killed (the leader half the time), servers cut or
# blackholed, lockouts on random servers, unlocks; prints lockouts lost and
# double admissions (a rate bucket and a nonce contested across the
# servers) and exits non-zero unless all are zero. `scripts/chaos.sh fleet`
# runs the fleet's rounds alone (no root needed).
# Usage: scripts/chaos.sh [fleet] [ROUNDS] [REPORT.md]
set -euo pipefail
cd "$(dirname "$0")/.."
only_fleet=
if [ "${1:-}" = fleet ]; then
  only_fleet=1
  shift
fi
rounds=${1:-50}
report=${2:-$(mktemp)}
rm -f "$report" "$report.fleet" # a report left by an earlier run must not stand for this one
status=0
if [ -z "$only_fleet" ]; then
  set +e
  COILY_CHAOS_ROUNDS=$rounds COILY_CHAOS_REPORT=$(realpath "$report") \
    go test -count=1 -timeout 60m -run '^TestChaos$' -v ./cmd/coily/ >"$report.log" 2>&1
  status=$?
  set -e
  grep -E -- '^\s*--- (FAIL|PASS|SKIP)|^(FAIL|ok)' "$report.log" || true
  [ -s "$report" ] || { echo "no report; the test log is $report.log" >&2; tail -50 "$report.log" >&2; exit 1; }
  echo
  echo "coily chaos suite: $rounds rounds, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores"
  cat "$report"
  # Columns 5 to 10 of each scenario row: lost, twice, unanswered, more
  # open, survived lockout, others refused.
  if awk -F'|' 'NR > 2 && /^\|/ { for (i = 5; i <= 10; i++) if ($i + 0 != 0) bad = 1 } END { exit !bad }' "$report"; then
    echo "chaos: some count is not zero" >&2
    status=1
  fi
fi

# The fleet's rounds: the test fails when a lockout was lost or anything
# admitted twice, and writes its table either way.
set +e
COILY_CHAOS_ROUNDS=$rounds COILY_FLEET_CHAOS_REPORT=$(realpath "$report.fleet") \
  go test -count=1 -timeout 60m -run '^TestFleetChaos$' -v ./fleet/ >"$report.fleet.log" 2>&1
fleet=$?
set -e
grep -E -- '^\s*--- (FAIL|PASS|SKIP)|^(FAIL|ok)|random seed|: lost|answered' "$report.fleet.log" || true
[ -s "$report.fleet" ] || { echo "no fleet report; the test log is $report.fleet.log" >&2; tail -50 "$report.fleet.log" >&2; exit 1; }
echo
echo "coily fleet chaos: $rounds rounds, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores"
cat "$report.fleet"
if [ "$fleet" != 0 ]; then
  echo "fleet chaos: a lockout was lost or something admitted twice (or the test failed: $report.fleet.log)" >&2
  status=1
fi
exit $status
