#!/usr/bin/env bash
# Fuzz every decoder a remote caller reaches, one target after another, for
# a fixed time each; outside CI (CI runs the targets' seed corpora as plain
# tests with `go test`).
#
# Usage: bench/fuzz.sh [TIME]
#   TIME is a `go test -fuzztime` value per target: a duration (60s, 5m) or
#   a count of executions (100000x). Default: $FUZZTIME, else 60s.
#
# It prints one line per target (executions, new interesting inputs) and
# exits non-zero at the first target that fails; the failing input is then
# in testdata/fuzz/<Target>/, to be committed as a regression seed once
# fixed.
set -euo pipefail

fuzztime="${1:-${FUZZTIME:-60s}}"
targets=(
	FuzzStartBody
	FuzzHookBody
	FuzzOpenAIChatRequest
	FuzzAnthropicMessagesRequest
	FuzzAGUIRequest
	FuzzChatWires
	FuzzS3Request
	FuzzSigV4
	FuzzJournalOpen
	FuzzSchemaValidate
)

cd "$(dirname "$0")/.."
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for target in "${targets[@]}"; do
	if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" . >"$log" 2>&1; then
		cat "$log"
		echo "FAIL ${target} (fuzztime ${fuzztime})"
		exit 1
	fi
	# The last progress line: "fuzz: elapsed: 60s, execs: N (R/sec), new interesting: K (total: T)".
	progress="$(grep '^fuzz: elapsed' "$log" | tail -n 1 || true)"
	echo "ok   ${target} ${fuzztime}: ${progress#fuzz: }"
done
