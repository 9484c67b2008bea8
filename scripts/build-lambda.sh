#!/usr/bin/env bash
# Build the AWS Lambda deployment zip of gpuwarden's scheduled enforcement.
#
#   scripts/build-lambda.sh [-o dist/gpuwarden-lambda.zip] [--arch arm64|x86_64]
#                           [--python 3.12] [--no-boto3] [--no-deps]
#
# The zip holds what engine.lambda_handler.handler imports and nothing else: the engine,
# remediations, the built-in policy pack (as engine/builtin_policies, the wheel's layout) and the
# core runtime dependencies (pydantic, PyYAML, jinja2, orjson, tzdata, boto3), installed with
# `pip install --target` as binary wheels for the Lambda platform. No Google or Azure SDK, no
# Kubernetes client, no CLI or webhook server dependencies. Modules are precompiled when a
# matching interpreter (python3.12) is on PATH: /var/task is read-only, so Lambda would
# otherwise compile every module again at each cold start.
#
#   --no-boto3   use the boto3 the Lambda runtime ships (smaller zip, version not pinned)
#   --no-deps    only gpuwarden's own code (for a dependencies layer, or to inspect the layout)
#   LAMBDA_PYTHON=/path/to/python3.12   the interpreter that precompiles (default python3.12)
#
# The zip is reproducible: sorted entries, fixed timestamps, so terraform's source_code_hash
# only changes when the content does.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
output="$repo/dist/gpuwarden-lambda.zip"
arch="arm64"
python_version="3.12"
with_boto3=1
with_deps=1

while [[ $# -gt 0 ]]; do
  case "$1" in
    -o|--output) output="$2"; shift 2 ;;
    --arch) arch="$2"; shift 2 ;;
    --python) python_version="$2"; shift 2 ;;
    --no-boto3) with_boto3=0; shift ;;
    --no-deps) with_deps=0; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "build-lambda: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

case "$arch" in
  arm64) platform="manylinux2014_aarch64" ;;
  x86_64) platform="manylinux2014_x86_64" ;;
  *) echo "build-lambda: --arch must be arm64 or x86_64" >&2; exit 2 ;;
esac

host_python="${PYTHON:-python3}"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT

# The runtime dependencies, with the lower bounds pyproject.toml declares for them.
requirements() {
  local names=(pydantic PyYAML jinja2 orjson tzdata)
  [[ $with_boto3 == 1 ]] && names+=(boto3)
  "$host_python" - "$repo/pyproject.toml" "${names[@]}" <<'PY'
import re
import sys
import tomllib

with open(sys.argv[1], "rb") as handle:
    project = tomllib.load(handle)["project"]
declared = list(project.get("dependencies", []))
for extra in project.get("optional-dependencies", {}).values():
    declared.extend(extra)
for name in sys.argv[2:]:
    pattern = re.compile(rf"^{re.escape(name)}\s*([<>=!~].*)?$", re.IGNORECASE)
    match = next((d for d in declared if pattern.match(d.split(";")[0].strip())), None)
    print(match.split(";")[0].strip() if match else name)
PY
}

if [[ $with_deps == 1 ]]; then
  mapfile -t reqs < <(requirements)
  echo "build-lambda: installing ${reqs[*]} for $platform, CPython $python_version" >&2
  "$host_python" -m pip install --quiet --disable-pip-version-check --no-compile \
    --no-warn-conflicts --root-user-action=ignore \
    --target "$stage" --platform "$platform" --implementation cp \
    --python-version "$python_version" --only-binary=:all: --upgrade "${reqs[@]}"
  # Nothing the handler needs at run time: console scripts and type stubs' caches.
  rm -rf "$stage/bin"
fi

# gpuwarden itself, laid out as the wheel installs it, as Python sources: a compiled core built
# in the checkout (docs/compiled-core.md) is for this machine's platform, not Lambda's.
copy_package() {
  (cd "$repo" && find "$1" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -name '*.so' \
    -print0) |
    while IFS= read -r -d '' file; do
      mkdir -p "$stage/$(dirname "$file")"
      cp "$repo/$file" "$stage/$file"
    done
}
copy_package engine
copy_package remediations
mkdir -p "$stage/engine/builtin_policies"
cp -R "$repo/policies/." "$stage/engine/builtin_policies/"

compiler="${LAMBDA_PYTHON:-python$python_version}"
if "$compiler" -c "import sys; assert sys.version.startswith('$python_version.')" \
    >/dev/null 2>&1; then
  # unchecked-hash: the pyc is used as is (no mtime check against a read-only /var/task).
  "$compiler" -m compileall -q -j 0 --invalidation-mode unchecked-hash "$stage" \
    >/dev/null || echo "build-lambda: some files did not precompile (they run from source)" >&2
else
  echo "build-lambda: no python$python_version (set LAMBDA_PYTHON): modules not precompiled" >&2
fi

mkdir -p "$(dirname "$output")"
"$host_python" - "$stage" "$output" <<'PY'
import os
import sys
import zipfile

stage, output = sys.argv[1], sys.argv[2]
files = sorted(
    os.path.relpath(os.path.join(root, name), stage)
    for root, _, names in os.walk(stage)
    for name in names
)
unpacked = 0
with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
    for name in files:
        path = os.path.join(stage, name)
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = (0o755 if os.access(path, os.X_OK) else 0o644) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        with open(path, "rb") as handle:
            data = handle.read()
        unpacked += len(data)
        archive.writestr(info, data)
size = os.path.getsize(output)
mib = 1024 * 1024
print(f"{output}: {size / mib:.1f} MiB zipped, {unpacked / mib:.1f} MiB unzipped, "
      f"{len(files)} files (Lambda limits: 50 MiB zipped for a direct upload, "
      "250 MiB unzipped)")
PY
