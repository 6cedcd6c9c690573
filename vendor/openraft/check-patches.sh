#!/usr/bin/env bash
# Checks that vendor/openraft/src is openraft 0.9.25 as published plus patches/*.patch,
# applied in order: downloads the published crate from crates.io, applies the patches and
# compares. Prints nothing but the result; exits 1 on any difference.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
curl -sSfL https://static.crates.io/crates/openraft/openraft-0.9.25.crate | tar -xzf - -C "$work"
cd "$work/openraft-0.9.25"
for p in "$here"/patches/*.patch; do
    patch -s -p1 --no-backup-if-mismatch < "$p"
done
if diff -r "$work/openraft-0.9.25/src" "$here/src"; then
    echo "vendor/openraft/src = openraft 0.9.25 + $(ls "$here"/patches/*.patch | wc -l) patches"
else
    echo "vendor/openraft/src differs from openraft 0.9.25 + patches (above)"
    exit 1
fi
