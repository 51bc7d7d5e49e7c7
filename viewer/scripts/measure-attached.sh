#!/usr/bin/env bash
# Measures what watching a job costs the viewer: starts a `gangway train moe` served live on a
# loopback port, starts Xvfb and a release gangway-viewer in a real window attached to the job
# (`--attach`, which opens the Attached tab), then samples the viewer process's CPU time (utime +
# stime from /proc, all its threads) and resident memory every 10 s, and prints each minute's CPU
# share of one core and RSS at its end. The job's own CPU is not counted: it is another process.
#
#   viewer/scripts/measure-attached.sh [MINUTES] [DEVICES] [WIDTHxHEIGHT]
#
# MINUTES defaults to 10, DEVICES (virtual devices of one lavapipe, trained over) to 2, the
# window to 1280x800. Needs Xvfb (Debian: xvfb); build both first with `cargo build --release
# --bin gangway -p gangway-viewer`.
set -euo pipefail
cd "$(dirname "$0")/../.."

viewer=target/release/gangway-viewer
gangway=target/release/gangway
minutes=${1:-10}
devices=${2:-2}
size=${3:-1280x800}
for bin in "$viewer" "$gangway"; do
  [ -x "$bin" ] || { echo "build it first: cargo build --release --bin gangway -p gangway-viewer" >&2; exit 1; }
done
command -v Xvfb >/dev/null || { echo "needs Xvfb (Debian: xvfb)" >&2; exit 1; }
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$work}

# A job longer than the measurement: it is stopped at the end.
"$gangway" --backends vulkan --virtual-devices "$devices" --live 127.0.0.1:0 \
  train moe --devices "$devices" --steps 1000000 --batch 64 --eval-every 0 \
  >/dev/null 2>"$work/job.err" &
for _ in $(seq 1 100); do
  addr=$(sed -n 's/^live: serving this job at //p' "$work/job.err" | head -n 1)
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "${addr:-}" ] || { echo "the job named no address:" >&2; cat "$work/job.err" >&2; exit 1; }

display=:$((90 + RANDOM % 9))
Xvfb "$display" -screen 0 "${size}x24" >/dev/null 2>&1 &
sleep 1
# A fresh config directory: no remembered tab, theme or window size.
DISPLAY=$display XDG_CONFIG_HOME=$work/config XDG_DATA_HOME=$work/data \
  "$viewer" --attach "$addr" >/dev/null 2>"$work/viewer.err" &
pid=$!
sleep 10
# The pointer away from the timeline, so no hover text is drawn (Xvfb starts it mid-screen).
if command -v xdotool >/dev/null; then
  DISPLAY=$display xdotool mousemove 5 790
fi

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }
echo "# $(date -u +%Y-%m-%d), the job at $addr on $devices devices, the viewer attached ($size)"
echo "| minute | CPU (share of one core) | RSS at its end (MB) |"
echo "| --- | --- | --- |"
start=$(cpu)
for m in $(seq 1 "$minutes"); do
  t0=$(date +%s.%N); c0=$(cpu)
  for _ in 1 2 3 4 5 6; do
    sleep 10
    kill -0 "$pid" 2>/dev/null || { echo "the viewer exited:" >&2; cat "$work/viewer.err" >&2; exit 1; }
  done
  t1=$(date +%s.%N); c1=$(cpu)
  share=$(echo "($c1 - $c0) / $ticks / ($t1 - $t0) * 100" | bc -l)
  printf '| %d | %.1f%% | %.1f |\n' "$m" "$share" "$(echo "$(rss) / 1024" | bc -l)"
done
echo "total CPU: $(echo "($(cpu) - $start) / $ticks" | bc -l | xargs printf '%.1f') s over $minutes minutes"
