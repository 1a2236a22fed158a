# Shared by scripts/test and scripts/bench: installs missing Debian packages.
# Sourced, not run.

# ensure_packages PKG...: installs the missing ones with apt-get when root;
# otherwise prints the exact command to run and exits.
ensure_packages() {
  local missing=()
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -eq 0 ]; then
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "mempool needs these Debian packages; please run:" >&2
    echo "  sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
}

# The repository root, whatever the caller's directory.
repo_root() { cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd; }
