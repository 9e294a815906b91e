#!/usr/bin/env bash
# Prints the directory of the shared trace samples for `make` (the default of
# RACKCACHE_TRACES): ../shared/traces beside this clone; for a clone of a
# local checkout (`git clone /work/main /tmp/x`, as CI and the fresh-clone
# check do), ../shared/traces beside the checkout it was cloned from. When
# neither exists it prints the first, so a test that needs the samples names
# where it looked. The samples' licenses keep them out of the repository.
#
# Usage: hack/traces-dir.sh [--help]
source "$(dirname "$0")/lib.sh"
case "${1:-}" in --help|-h) usage; exit 0 ;; esac

beside_clone="$(cd "$REPO_ROOT/.." && pwd)/shared/traces"
if [[ -d "$beside_clone" ]]; then
  echo "$beside_clone"
  exit 0
fi
origin="$(git -C "$REPO_ROOT" config --get remote.origin.url 2>/dev/null || true)"
origin="${origin#file://}"
if [[ "$origin" == /* && -d "$origin/../shared/traces" ]]; then
  (cd "$origin/../shared/traces" && pwd)
  exit 0
fi
echo "$beside_clone"
