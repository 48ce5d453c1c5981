#!/usr/bin/env bash
# check-breaking.sh — `buf breaking` of the working tree's protos against the previous commit
# of main (BREAKING_AGAINST overrides, e.g. '.git#branch=main' on a feature branch). Skipped,
# with a message, when there is no earlier commit with protos to compare with.
set -euo pipefail
cd "$(dirname "$0")/.."
against=${BREAKING_AGAINST:-}
if [ -z "$against" ]; then
  if git rev-parse -q --verify HEAD~1 >/dev/null && git cat-file -e HEAD~1:proto/agentworkspace 2>/dev/null; then
    against=".git#ref=HEAD~1"
  else
    echo "buf breaking: no earlier commit with protos; skipped"
    exit 0
  fi
fi
buf breaking --against "$against"
echo "buf breaking: no breaking changes against $against"
