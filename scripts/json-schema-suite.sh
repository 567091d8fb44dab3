#!/usr/bin/env bash
# Fetches the official JSON-Schema-Test-Suite (draft 2020-12) into target/json-schema-test-suite/.
#
# The suite is not published on its own in the registries this project uses; the pinned sdist
# of the `jsonschema` Python package carries it (json/tests/draft2020-12), so it is downloaded
# from PyPI by version and SHA-256 and only those JSON files are extracted. The test
# `tests/it/properties.rs::the_official_json_schema_test_suite_passes_for_every_enforced_keyword`
# runs this when the folder is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/target/json-schema-test-suite"
[[ -f "$dest/draft2020-12/additionalProperties.json" ]] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'jsonschema==4.23.0 --hash=sha256:d71497fef26351a33265337fa77ffeb82423f3ea21283cd9467bb03999266bc4\n' >"$work/requirements.txt"
python3 -m pip download --quiet --no-deps --no-binary :all: --require-hashes -r "$work/requirements.txt" -d "$work" \
  || { echo "json-schema-suite: could not download the pinned jsonschema sdist from PyPI" >&2; exit 1; }
tar -xzf "$work"/jsonschema-4.23.0.tar.gz -C "$work" 'jsonschema-4.23.0/json/tests/draft2020-12'
mkdir -p "$dest"
rm -rf "$dest/draft2020-12"
mv "$work/jsonschema-4.23.0/json/tests/draft2020-12" "$dest/draft2020-12"
echo "json-schema-suite: $(ls "$dest/draft2020-12" | wc -l) files in $dest/draft2020-12"
