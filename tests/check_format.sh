#!/usr/bin/env bash
# check_format.sh CLANG_FORMAT SOURCE_DIR: fails, naming the files, unless every C++ file of the
# project is formatted as .clang-format says. Fix with: clang-format -i FILE...
set -euo pipefail
clang_format=$1
cd "$2"
mapfile -t files < <(find lib include tests examples benchmarks fuzz -name '*.h' -o -name '*.cc' |
                     grep -v '^tests/data/' | sort)
bad=()
for f in "${files[@]}"; do
  "$clang_format" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -ne 0 ]; then
  echo "not formatted as .clang-format says (clang-format -i to fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "${#files[@]} files follow .clang-format"
