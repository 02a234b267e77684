#!/usr/bin/env bash
# fresh-clone.sh DEST: makes DEST what a new user's clone of this repository would be,
# with the work tree's changes on it: a clone of HEAD (depth 1), then the files that
# differ from HEAD (staged or not) and the new ones git does not ignore copied over, and
# the deleted ones deleted. No bin/, .local-stack/ or other ignored files. The README's
# quickstart tests (scripts/compose-test.sh, scripts/quickstart-test.sh) run in one.
set -euo pipefail
dest=${1:?usage: fresh-clone.sh DEST}
cd "$(dirname "$0")/.."
root=$(pwd)
git clone -q --depth 1 "file://$root" "$dest"
{ git diff -z --name-only --diff-filter=d HEAD; git ls-files -z --others --exclude-standard; } |
  tar -C "$root" --null -T - -cf - | tar -C "$dest" -xf -
git diff -z --name-only --diff-filter=D HEAD | (cd "$dest" && xargs -0 -r rm -f --)
changes=$(git -C "$dest" status --porcelain | wc -l)
echo "$(git -C "$dest" rev-parse --short=12 HEAD), $changes file(s) of the work tree's changes on it, in $dest"
