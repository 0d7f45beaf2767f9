# Sourced by ops/up.sh and ops/test.sh: a pip install that shows what it is doing on one line and keeps the
# full output (setuptools' build warnings included) in a log file instead of the terminal.
#
#   pip_with_progress LOG_FILE PYTHON -m pip install ARGS...   (appends to LOG_FILE)
#
# On a terminal the line is rewritten in place ("pip [12 packages] Collecting torch==2.13.0"); elsewhere (CI, a pipe)
# nothing is printed until the end. A failure prints the log's last lines and where the whole log is.
pip_with_progress() {
  local log="$1" count=0 line width status
  shift
  mkdir -p "$(dirname "$log")"
  width=$(( $(tput cols 2>/dev/null || echo 80) - 4 ))
  [ "$width" -gt 20 ] || width=76
  set +e
  "$@" 2>&1 | while IFS= read -r line; do
    printf '%s\n' "$line" >>"$log"
    [ -t 2 ] || continue
    case "$line" in
      Collecting*) count=$((count + 1)) ;;
      *Downloading*|Installing*|Building*|Successfully*) ;;
      *) continue ;;
    esac
    line="pip [$count packages] ${line#"${line%%[![:space:]]*}"}"
    printf '\r\033[K  %s' "${line:0:$width}" >&2
  done
  status=${PIPESTATUS[0]}
  set -e
  [ -t 2 ] && printf '\r\033[K' >&2
  if [ "$status" -ne 0 ]; then
    echo "pip failed (exit $status); its last lines:" >&2
    tail -n 30 "$log" >&2
    echo "whole output: $log" >&2
  fi
  return "$status"
}
