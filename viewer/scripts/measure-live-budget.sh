#!/usr/bin/env bash
# Measures what the Live tab costs the machine: starts Xvfb, runs a release gangway-viewer in a
# real window, clicks the "Live timeline" tab (the live workload runs while it is shown), then
# samples the viewer process's CPU time (utime + stime from /proc, all its threads: the UI, the
# workload, the runtime's workers) and resident memory every 10 s, and prints each minute's CPU
# share of one core and RSS at its end.
#
#   viewer/scripts/measure-live-budget.sh [MINUTES] [WIDTHxHEIGHT] [TAB_X] [VIEWER ARGS...]
#
# MINUTES defaults to 10, the window to 1280x800; TAB_X is where the tab's label is (x, in
# pixels, at y 19: the default layout's). Arguments after those go to the viewer: the
# README's command is `... 10 1280x800 200 --virtual-devices 2`. Needs Xvfb and xdotool (Debian: xvfb, xdotool); build
# the viewer first with `cargo build --release -p gangway-viewer`.
set -euo pipefail
cd "$(dirname "$0")/../.."

viewer=target/release/gangway-viewer
minutes=${1:-10}
size=${2:-1280x800}
tab_x=${3:-200}
shift $(( $# < 3 ? $# : 3 ))
[ -x "$viewer" ] || { echo "build it first: cargo build --release -p gangway-viewer" >&2; exit 1; }
for tool in Xvfb xdotool; do
  command -v "$tool" >/dev/null || { echo "needs $tool (Debian: xvfb, xdotool)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

display=:$((90 + RANDOM % 9))
Xvfb "$display" -screen 0 "${size}x24" >/dev/null 2>&1 &
sleep 1
export DISPLAY=$display XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$work}
# A fresh config directory: no remembered tab, theme or window size.
XDG_CONFIG_HOME=$work/config XDG_DATA_HOME=$work/data "$viewer" "$@" &
pid=$!
sleep 8
xdotool mousemove "$tab_x" 19 click 1
# Away from the timeline, so no hover text is drawn.
xdotool mousemove 5 790
sleep 2

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }
echo "| minute | CPU (share of one core) | RSS at its end (MB) |"
echo "| --- | --- | --- |"
start=$(cpu)
for m in $(seq 1 "$minutes"); do
  t0=$(date +%s.%N); c0=$(cpu)
  for _ in 1 2 3 4 5 6; do
    sleep 10
    kill -0 "$pid" 2>/dev/null || { echo "the viewer exited" >&2; exit 1; }
  done
  t1=$(date +%s.%N); c1=$(cpu)
  share=$(echo "($c1 - $c0) / $ticks / ($t1 - $t0) * 100" | bc -l)
  printf '| %d | %.1f%% | %.1f |\n' "$m" "$share" "$(echo "$(rss) / 1024" | bc -l)"
done
echo "total CPU: $(echo "($(cpu) - $start) / $ticks" | bc -l | xargs printf '%.1f') s over $minutes minutes"
