#!/usr/bin/env bash
# Installs the real SARIF consumers the tests validate against, into .tools/node:
#   @microsoft/sarif-multitool-linux  (Sarif.Multitool validate)
#   @microsoft/jest-sarif             (ships the SARIF 2.1.0 JSON Schema)
# Idempotent: packages already present are not fetched again.
# Override the location with GPUWARDEN_NODE_TOOLS.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${GPUWARDEN_NODE_TOOLS:-$repo_root/.tools/node}"
packages=(
    "@microsoft/sarif-multitool-linux@5.7.0"
    "@microsoft/jest-sarif@1.0.0-beta.0"
)

if ! command -v npm >/dev/null 2>&1; then
    echo "install-sarif-tools: npm is required (apt-get install -y nodejs npm)" >&2
    exit 1
fi

missing=()
for spec in "${packages[@]}"; do
    name="${spec%@*}"
    if [[ ! -f "$prefix/node_modules/$name/package.json" ]]; then
        missing+=("$spec")
    fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
    chmod u+x "$prefix/node_modules/@microsoft/sarif-multitool-linux/Sarif.Multitool"
    echo "install-sarif-tools: already installed in $prefix"
    exit 0
fi

mkdir -p "$prefix"
# Saved into $prefix/package.json so a later partial install does not prune the other package.
npm install --prefix "$prefix" --no-audit --no-fund --save-exact "${missing[@]}"
# npm may skip the package's own postinstall (chmod u+x); do it here.
chmod u+x "$prefix/node_modules/@microsoft/sarif-multitool-linux/Sarif.Multitool"
echo "install-sarif-tools: installed ${missing[*]} into $prefix"
