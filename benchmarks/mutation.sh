#!/bin/sh
# Mutation testing of the decision modules ([tool.mutmut] in pyproject.toml) with mutmut, in a throw-away
# copy of HEAD so the working tree is never touched. Not part of CI: about half an hour on 2 cores.
# Usage: benchmarks/mutation.sh [MAX_CHILDREN]; prints the counts and every surviving mutant, and leaves
# the copy (its mutants/ folder answers `mutmut show NAME`) at the path it prints first.
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
mutmut=${VENV:-$repo/.venv}/bin/mutmut
work=$(mktemp -d "${TMPDIR:-/tmp}/verl-health-mutation.XXXXXX")
echo "mutation run in $work"
git -C "$repo" archive HEAD | tar -x -C "$work"
cd "$work"
"$mutmut" run --max-children "${1:-2}" >mutmut-run.log 2>&1 || { tail -20 mutmut-run.log; exit 1; }
"$mutmut" export-cicd-stats >/dev/null
cat mutants/mutmut-cicd-stats.json
"$mutmut" results
