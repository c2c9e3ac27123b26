#!/usr/bin/env bash
# Installs what `make run` and `make test` need, idempotently and with
# progress lines: Debian packages (libvpx, libopus, espeak-ng, pocketsphinx,
# Java, Chromium, ffmpeg for video moderation, jq for the walkthroughs), the
# npm stand-ins under scripts/ (DynamoDB Local, SQS server, browser tooling,
# @livekit/agents), and livekit-server
# built from its pinned Go module. A second run is fast.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
say() { echo "setup: $*"; }

OAPI_CODEGEN_VERSION=2.8.2
LIVEKIT_VERSION=1.13.5
APT_PACKAGES=(libvpx-dev libopus-dev libespeak-ng-dev libpocketsphinx-dev libsphinxbase-dev pocketsphinx-en-us pocketsphinx-testdata pkg-config default-jre-headless chromium ffmpeg util-linux jq)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Java may come from elsewhere than Debian's default-jre-headless.
if command -v java >/dev/null 2>&1; then
  missing=("${missing[@]/default-jre-headless/}")
fi
# Node.js runs the SQS server and the npm tooling; the image usually has a
# newer one than Debian's, which is only the fallback.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  say "installing Debian packages: ${missing[*]} (apt-get)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages present (${APT_PACKAGES[*]})"
fi

stamp=scripts/node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ scripts/package-lock.json -nt "$stamp" ]; then
  say "installing npm packages under scripts/ (DynamoDB Local, SQS server, playwright-core, livekit-client, esbuild)"
  (cd scripts && npm ci --no-audit --no-fund --loglevel=error)
else
  say "npm packages present"
fi

command -v go >/dev/null 2>&1 || { echo "setup: go is required (see go.mod for the version)" >&2; exit 1; }
# go_tool NAME VERSION VERSION_FLAG PACKAGE: build a pinned Go command into
# .local/bin/NAME unless that version is there.
go_tool() {
  local name=$1 version=$2 flag=$3 pkg=$4 bin=.local/bin/$1 tmp
  if [ -x "$bin" ] && "$bin" "$flag" 2>/dev/null | grep -q "$version"; then
    say "$name $version present"
    return
  fi
  say "building $name v$version with go install"
  mkdir -p .local/bin
  tmp=$(mktemp -d)
  GOBIN="$tmp" go install "$pkg@v$version"
  mv "$tmp/$(basename "${pkg%%@*}")" "$bin"
  rm -rf "$tmp"
}
# livekit-server takes 2-3 minutes to build the first time.
go_tool livekit-server "$LIVEKIT_VERSION" --version github.com/livekit/livekit-server/cmd/server
# oapi-codegen generates scripts/apiclient from the API reference; its test
# checks the committed client is what this pinned version makes.
go_tool oapi-codegen "$OAPI_CODEGEN_VERSION" -version github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen
say "ready"
