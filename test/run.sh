#!/usr/bin/env bash
# Runs every test of sluice — unit, replay, integration on a real Temporal
# server, end-to-end on the local stack, the install guide on a stack of its
# own, a short chaos run — and then the demo, unattended.
# Expects the tool environment from test/tools/install.sh and SLUICE_BIN.
# Prints each part's result and, last, a line "N passed, N failed".
#
# The parts run in two lanes at once, each stack on its own ports and
# network namespaces: most of a long scenario's time is spent waiting on
# holds and timers, which leaves the machine idle while one stack runs it.
#   1. go test ./..., without the two longest e2e scenarios; then the
#      install guide and the demo;
#   2. those two scenarios (the upgrade under running rollouts, waves
#      across two clusters) on an e2e stack of their own; then the short
#      chaos run.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
# Screenshots and other artifacts of the tests land here.
export SLUICE_ARTIFACTS=${SLUICE_ARTIFACTS:-$PWD/test-artifacts}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# The e2e scenarios of lane 2: each runs alone on its stack for minutes.
long='^(TestUpgradeUnderRunningRollouts|TestWavesOnTwoKnativeClusters)$'

# Each lane's part writes its log and then "passed failed seconds" to
# $logs/<part>.result.
finish() { # part status passed failed begin
  local failed=$4
  [[ $2 -ne 0 && $failed -eq 0 ]] && failed=1
  echo "$3 $failed $((SECONDS - $5))" >"$logs/$1.result"
}
gotest() { # part go-test-args...
  local part=$1 begin=$SECONDS
  shift
  go test -count=1 "$@" >"$logs/$part.log" 2>&1
  local status=$?
  finish "$part" $status "$(grep -cE '^\s*--- PASS' "$logs/$part.log")" "$(grep -cE '^\s*--- FAIL' "$logs/$part.log")" $begin
}
single() { # part go-test-args... (one test, counted once)
  local part=$1 begin=$SECONDS
  shift
  go test -count=1 "$@" >"$logs/$part.log" 2>&1
  local status=$?
  if [[ $status -eq 0 ]]; then finish "$part" 0 1 0 $begin; else finish "$part" 1 0 1 $begin; fi
}

lane1() {
  # Four parallel tests at a time: the e2e scenarios that share nothing run
  # together on the stack (test/e2e/main_test.go says which).
  gotest unit -timeout 30m -parallel 4 -v -skip "$long" ./...
  # docs/install.md, followed step by step on a stack of its own.
  SLUICE_INSTALL_GUIDE=1 single guide -timeout 15m -v -run '^TestInstallGuide$' ./test/install/
  local begin=$SECONDS
  SLUICE_DEMO_UNATTENDED=1 ./bin/sluice-dev --temporal-port 0 --ui-port 0 >"$logs/demo.log" 2>&1
  local status=$?
  if [[ $status -eq 0 ]]; then finish demo 0 1 0 $begin; else finish demo 1 0 1 $begin; fi
}
lane2() {
  gotest e2e-long -timeout 20m -v -run "$long" ./test/e2e/
  SLUICE_CHAOS=short single chaos -timeout 25m -v -run '^TestChaos$' ./test/chaos/
}
lane1 &
lane2 &
wait

passed=0 failed=0
for part in unit e2e-long chaos guide demo; do
  read -r p f s <"$logs/$part.result" || { p=0 f=1 s=0; }
  passed=$((passed + p)) failed=$((failed + f))
  log=$logs/$part.log
  echo
  case $part in
  unit | e2e-long)
    echo "go test ($part, ${s}s):"
    grep -E '^(ok|FAIL|panic:)' "$log" || true
    if [[ $f -ne 0 ]]; then
      echo "Failures (from the verbose log):"
      grep -nE -B3 -A40 '^\s*--- FAIL|^panic:|^FAIL\s' "$log" | tail -400
    fi
    ;;
  chaos)
    echo "Chaos, short (${s}s):"
    sed -nE '/chaos: seed .* rollouts in/,/_test\.go:[0-9]+:|--- (PASS|FAIL)/p' "$log"
    if [[ $f -ne 0 ]]; then
      # The test's own messages; the stack's logs it dumps after them are
      # in the artifacts directory, not here.
      grep -nE '_test\.go:[0-9]+:|^\s*--- FAIL|^panic:|^FAIL' "$log" | grep -vE '^[0-9]+:\s*(time=|\{)' | head -100
    fi
    ;;
  guide)
    echo "Install guide (${s}s):"
    if [[ $f -eq 0 ]]; then
      grep -E 'install\.md —|not covered|^(ok|--- PASS)' "$log" | sed -E 's/^\s*guide_test\.go:[0-9]+: //'
    else
      grep -nE '_test\.go:[0-9]+:|^\s*--- FAIL|^panic:|^FAIL' "$log" | cut -c1-400 | tail -60
    fi
    ;;
  demo)
    echo "Demo, unattended (${s}s):"
    if [[ $f -eq 0 ]]; then tail -25 "$log"; else tail -120 "$log"; fi
    ;;
  esac
done
echo "tests and demo took $((SECONDS - start))s"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
