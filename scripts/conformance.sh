#!/usr/bin/env bash
# Run tests/conformance (porter's real-path facts against upstream's own code) on upstream's releases:
#   scripts/conformance.sh pinned   the releases tests/conformance/requirements.lock pins (what CI runs)
#   scripts/conformance.sh newest   the newest sglang, vLLM and lm-eval on PyPI today, the transformers that sglang
#                                   release pins and the tokenizers / huggingface_hub that transformers release
#                                   bounds (read in their METADATA), and the lock's other libraries
# Wheels are fetched once per set of versions (pip download, hashes checked) into $PORTER_CONFORMANCE_CACHE
# (default ~/.cache/porter/conformance; newest: a folder per version set under it, with its lock written there).
# Extra arguments go to pytest (e.g. -x, -k recipe). PYTHON picks the interpreter (default: python3).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
mode=${1:-}
shift || true
cache=${PORTER_CONFORMANCE_CACHE:-$HOME/.cache/porter/conformance}
lock=tests/conformance/requirements.lock

newest_version() {  # the newest release of $1 on the index pip uses
  "$python" -m pip index versions "$1" --disable-pip-version-check 2>/dev/null | sed -n '1s/.*(\(.*\)).*/\1/p'
}

fetch() {  # pip download, no dependencies, wheels only, into folder $1
  local folder=$1
  shift
  "$python" -m pip download -q --no-deps --only-binary :all: --disable-pip-version-check -d "$folder" "$@"
}

required() {  # what the wheel of $2 in folder $1 requires of package $3, e.g. transformers==5.19.0
  "$python" -c '
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    metadata = next(name for name in wheel.namelist() if name.endswith(".dist-info/METADATA"))
    pattern = r"^Requires-Dist: (" + re.escape(sys.argv[2]) + r"\b[^;\n]*)$"
    print(re.search(pattern, wheel.read(metadata).decode(), re.M | re.I)[1].replace(" ", ""))
' "$(ls "$1/$2"-*.whl | head -1)" "$3"
}

hashed() {  # "$3==VERSION --hash=sha256:..." for the wheel of $2 (its file name's stem) in folder $1
  local wheel
  wheel=$(ls "$1/$2"-*.whl | head -1)
  echo "$3==$(basename "$wheel" | cut -d- -f2) --hash=sha256:$(sha256sum "$wheel" | cut -d' ' -f1)"
}

unfolded() {  # a requirements file with its continuation lines joined
  sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$1"
}

case "$mode" in
  pinned) ;;
  newest)
    versions=()
    for name in sglang vllm lm-eval; do
      version=$(newest_version "$name")
      [ -n "$version" ] || { echo "conformance: pip could not list the releases of $name" >&2; exit 2; }
      versions+=("$name==$version")
    done
    folder="$cache/newest-$(IFS=_; echo "${versions[*]}" | tr -d '=')"
    if [ ! -f "$folder/requirements.lock" ]; then  # a folder without its lock is an interrupted fetch: start over
      rm -rf "$folder"
      mkdir -p "$folder"
      fetch "$folder" "${versions[@]}"
      fetch "$folder" "$(required "$folder" sglang transformers)"
      fetch "$folder" "$(required "$folder" transformers tokenizers)" "$(required "$folder" transformers huggingface-hub)"
      {
        hashed "$folder" sglang sglang
        hashed "$folder" vllm vllm
        hashed "$folder" lm_eval lm-eval
        hashed "$folder" transformers transformers
        hashed "$folder" tokenizers tokenizers
        hashed "$folder" huggingface_hub huggingface-hub
        unfolded "$lock" | grep -E '^[A-Za-z]' | grep -vE '^(sglang|vllm|lm-eval|transformers|tokenizers|huggingface-hub)=='
      } >"$folder/requirements.lock.partial"
      mv "$folder/requirements.lock.partial" "$folder/requirements.lock"
    fi
    export PORTER_CONFORMANCE_LOCK="$folder/requirements.lock" PORTER_CONFORMANCE_CACHE="$folder"
    lock=$PORTER_CONFORMANCE_LOCK
    ;;
  *)
    echo "usage: scripts/conformance.sh pinned|newest [pytest arguments]" >&2
    exit 2
    ;;
esac

echo "conformance ($mode): $(unfolded "$lock" | grep -oE '^[A-Za-z0-9_.-]+==[^ ]+' | tr '\n' ' ')"
exec "$python" -m pytest -q tests/conformance "$@"
