#!/usr/bin/env bash
# Runs every test of sluice — unit, replay, integration on a real Temporal
# server, end-to-end on the local stack, the install guide on a stack of its
# own, a short chaos run — and then the demo, unattended.
# Expects the tool environment from test/tools/install.sh and SLUICE_BIN.
# Prints each package's result and, last, a line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
epoch=$(date +%s)
# Seconds since the start, for the parts' times printed at the end (the
# lower lane is a subshell: the clock, not $SECONDS).
since() { echo $(($(date +%s) - epoch)); }
# Screenshots and other artifacts of the tests land here.
export SLUICE_ARTIFACTS=${SLUICE_ARTIFACTS:-$PWD/test-artifacts}
mkdir -p "$SLUICE_ARTIFACTS"
# The whole verbose log stays with the artifacts: per-test times and
# every failure's context.
log=$SLUICE_ARTIFACTS/go-test.log
# Names of whatever failed, repeated on the last lines so a short tail of
# the output still says what to look at.
failures=()

# Three lanes. The short chaos run (a fixed seed) injects faults with
# deadlines and needs a quiet machine, yet keeps it only about a fifth
# busy: it runs first, at normal priority, and then the e2e package, the
# longest part (four parallel tests at a time: the scenarios that share
# nothing run together on the stack; test/e2e/main_test.go says which).
# The e2e package's scenarios that start more clusters beside the stack —
# the longest, the upgrade under running rollouts, which replaces sluice
# there and so runs alone on its stack, and the two with clusters sharing
# one Temporal — run in a package run of their own, on a stack of their
# own, beside the chaos run.
# And at a lower CPU priority, so they fill the idle time without slowing
# what has deadlines: the other packages, then docs/install.md followed
# step by step on a stack of its own, then the demo, unattended. Every
# part's output is kept and printed in one order after.
clustered='^(TestUpgradeUnderRunningRollouts|TestClustersShareTemporalOnKnative|TestWavesOnTwoKnativeClusters|TestCLIVerbs|TestComparisonRollsBackSlowerCandidate)$'
# That lane and the short chaos run use Temporal's production topology
# (PostgreSQL, the frontend, history, matching and worker services apart,
# several shards, SQL visibility) instead of the dev server: the list, wave
# and report paths, the upgrade, and the faults of a Temporal cluster's
# parts meet what users run. The rest stays on the dev server, with its UI.
mapfile -t others < <(go list ./... | grep -vx 'github.com/sluicehq/sluice/test/e2e')
guidelog=$(mktemp)
demolog=$(mktemp)
# What the lower lane ran into, as shell assignments: its exit codes and times.
lanedone=$(mktemp)
{
  nice -n 10 go test -count=1 -timeout 30m -v "${others[@]}" >"$log" 2>&1
  echo "status=$?; times=\"other packages until $(since)s\"" >"$lanedone"
  SLUICE_INSTALL_GUIDE=1 nice -n 10 go test -count=1 -timeout 15m -v -run '^TestInstallGuide$' ./test/install/ >"$guidelog" 2>&1
  echo "guide=$?; times+=\", install guide until $(since)s\"" >>"$lanedone"
  SLUICE_DEMO_UNATTENDED=1 nice -n 10 ./bin/sluice-dev --temporal-port 0 --ui-port 0 >"$demolog" 2>&1
  echo "demo=$?; times+=\", demo until $(since)s\"" >>"$lanedone"
} &
lane=$!
upgradelog=$(mktemp)
upgradedone=$(mktemp)
{
  SLUICE_TEMPORAL=cluster go test -count=1 -timeout 20m -v -run "$clustered" ./test/e2e/ >"$upgradelog" 2>&1
  echo "upgrade=$?; upgradetimes=\"the upgrade and other clusters until $(since)s\"" >"$upgradedone"
} &
upgrader=$!
chaoslog=$(mktemp)
SLUICE_TEMPORAL=cluster SLUICE_CHAOS=short go test -count=1 -timeout 25m -v -run '^TestChaos$' ./test/chaos/ >"$chaoslog" 2>&1
chaos=$?
chaostimes="chaos run until $(since)s"
e2elog=$(mktemp)
go test -count=1 -timeout 30m -parallel 4 -v -skip "$clustered" ./test/e2e/ >"$e2elog" 2>&1
e2e=$?
e2etimes="e2e package until $(since)s"
wait "$upgrader"
upgrade=1 upgradetimes="the upgrade and other clusters did not finish"
# shellcheck disable=SC1090
source "$upgradedone"
rm -f "$upgradedone"
wait "$lane"
status=1 guide=1 demo=1 times="the other packages' lane did not finish"
# shellcheck disable=SC1090
source "$lanedone"
rm -f "$lanedone"
times+=", $upgradetimes, $chaostimes, $e2etimes"
[[ $e2e -eq 0 && $upgrade -eq 0 ]] || status=1
cat "$upgradelog" "$e2elog" >>"$log"
rm -f "$upgradelog" "$e2elog"
grep -E '^(ok|FAIL|panic:)' "$log" || true
passed=$(grep -cE '^\s*--- PASS' "$log")
failed=$(grep -cE '^\s*--- FAIL' "$log")
if [[ $status -ne 0 ]]; then
  echo
  echo "Failures (from the verbose log):"
  grep -nE -B3 -A40 '^\s*--- FAIL|^panic:|^FAIL\s' "$log" | tail -400
  [[ $failed -eq 0 ]] && failed=1
  mapfile -t failures < <(grep -E '^\s*--- FAIL|^FAIL\s+\S+' "$log" | sed -E 's/^\s+//; s/ \([0-9.]+s\)$//' | sort -u)
fi

echo
echo "Install guide:"
if [[ $guide -eq 0 ]]; then
  passed=$((passed + 1))
  grep -E 'install\.md —|not covered|^(ok|--- PASS)' "$guidelog" | sed -E 's/^\s*guide_test\.go:[0-9]+: //'
else
  failed=$((failed + 1))
  failures+=("install guide (TestInstallGuide)")
  grep -nE '_test\.go:[0-9]+:|^\s*--- FAIL|^panic:|^FAIL' "$guidelog" | cut -c1-400 | tail -60
fi
rm -f "$guidelog"

echo
echo "Chaos, short:"
chaoswhy=
if [[ $chaos -eq 0 ]]; then
  passed=$((passed + 1))
  sed -nE '/chaos: seed .* rollouts in/,/_test\.go:[0-9]+:|--- (PASS|FAIL)/p' "$chaoslog"
else
  failed=$((failed + 1))
  failures+=("short chaos run (TestChaos)")
  # The summary and the test's own messages; the stack's logs it dumps
  # after them are in the artifacts directory, not here.
  sed -nE '/chaos: seed .* rollouts in/,/_test\.go:[0-9]+:|--- (PASS|FAIL)/p' "$chaoslog"
  grep -nE '_test\.go:[0-9]+:|^\s*--- FAIL|^panic:|^FAIL' "$chaoslog" | grep -vE '^[0-9]+:\s*(time=|\{)' | head -100
  # Repeated at the very end: a short tail of the output then says why.
  chaoswhy=$({ sed -nE '/invariant violations: [1-9]/,/_test\.go:[0-9]+:|^\s*$/p' "$chaoslog"; grep -E '_test\.go:[0-9]+:' "$chaoslog"; } |
    grep -vE '^\s*(time=|\{)' | cut -c1-300 | awk '!seen[$0]++' | head -20)
fi
rm -f "$chaoslog"

echo
echo "Demo, unattended:"
cat "$demolog"
rm -f "$demolog"
if [[ $demo -eq 0 ]]; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  failures+=("unattended demo (sluice-dev)")
fi
if [[ ${#failures[@]} -gt 0 ]]; then
  echo
  echo "What failed:"
  printf '  %s\n' "${failures[@]}"
  [[ -n $chaoswhy ]] && printf 'The chaos run said:\n%s\n' "$chaoswhy"
fi
echo "tests and demo took $(since)s ($times)"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
