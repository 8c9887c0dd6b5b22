# Shared by scripts/test, scripts/demo and scripts/bench: installs missing Debian packages and
# configures a build. Sourced, not run.

GRYPH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GRYPH_PACKAGES=(cmake ninja-build pkg-config g++ clang clang-format libabsl-dev liblmdb-dev
                libfmt-dev catch2 libbenchmark-dev libzmq3-dev nlohmann-json3-dev)

# gryph_install_packages: apt-get installs what is missing when root; otherwise prints the exact
# command and exits non-zero.
gryph_install_packages() {
  local missing=()
  for p in "${GRYPH_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "gryph needs these Debian packages; install them as root with:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# gryph_configure BUILD_DIR [cmake args...]
gryph_configure() {
  local dir=$1; shift
  cmake -S "$GRYPH_ROOT" -B "$dir" -G Ninja "$@" >/dev/null
}

gryph_jobs() { nproc 2>/dev/null || echo 2; }
