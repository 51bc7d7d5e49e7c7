#!/usr/bin/env bash
# Measures how fast the viewer pans a large trace in a real window: starts Xvfb, opens the trace
# in a release gangway-viewer with --frame-stats, drags the timeline back and forth with xdotool,
# then moves the pointer over empty space (the frame floor: what any frame costs at that size),
# and prints the viewer's frame statistics for both.
#
#   viewer/scripts/measure-pan-fps.sh [TRACE.json] [WIDTHxHEIGHT]
#
# Without a trace it writes a synthetic one of 1M events (8 devices, a kernel and a transfer per
# step). Needs Xvfb, xdotool and python3 (for the synthetic trace); build the viewer first with
# `cargo build --release -p gangway-viewer`.
set -euo pipefail
cd "$(dirname "$0")/../.."

viewer=target/release/gangway-viewer
size=${2:-1280x820}
width=${size%x*}
height=${size#*x}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

[ -x "$viewer" ] || { echo "build it first: cargo build --release -p gangway-viewer" >&2; exit 1; }
for tool in Xvfb xdotool; do
  command -v "$tool" >/dev/null || { echo "needs $tool (Debian: xvfb, xdotool)" >&2; exit 1; }
done

trace=${1:-}
if [ -z "$trace" ]; then
  trace=$work/trace-1m.json
  python3 - "$trace" <<'PY'
import sys
devices, steps = 8, 62_500
state = 0x2545F4914F6CDD1D
def rand():
    global state
    state ^= (state << 13) & (2**64 - 1); state ^= state >> 7; state ^= (state << 17) & (2**64 - 1)
    return state
names = ["F0", "B0", "W0", "gemm", "F1", "B1"]
with open(sys.argv[1], "w") as out:
    out.write('{"traceEvents":[')
    out.write(",".join('{"ph":"M","name":"process_name","pid":%d,"args":{"name":"device %d"}}' % (d, d)
                       for d in range(devices)))
    for i in range(steps):
        t = i * 10_000
        for d in range(devices):
            busy = 1_000 + (i // 2_000) % 5 * 1_500 + rand() % 2_000
            send = 500 + rand() % 1_500
            out.write(',{"ph":"X","pid":%d,"tid":2,"cat":"kernel","name":"%s","ts":%.3f,"dur":%.3f,'
                      '"args":{"microbatch":%d,"clock":"host"}}' % (d, names[(i + d) % 6], t / 1e3, busy / 1e3, i % 8))
            out.write(',{"ph":"X","pid":%d,"tid":3,"cat":"transfer","name":"send","ts":%.3f,"dur":%.3f,'
                      '"args":{"clock":"host"}}' % (d, (t + busy) / 1e3, send / 1e3))
    out.write(']}')
PY
fi

display=:$((100 + RANDOM % 100))
Xvfb "$display" -screen 0 "$((width + 100))x$((height + 100))x24" >/dev/null 2>&1 &
sleep 2
export DISPLAY=$display XDG_RUNTIME_DIR=$work
"$viewer" --no-devices --frame-stats "$trace" 2>"$work/stats" >/dev/null &
for _ in $(seq 1 120); do
  window=$(xdotool search --name "gangway viewer" 2>/dev/null | head -1 || true)
  [ -n "$window" ] && break
  sleep 0.5
done
[ -n "$window" ] || { echo "the viewer window did not open" >&2; exit 1; }
xdotool windowmove "$window" 0 0 windowsize "$window" "$width" "$height"
# Opening runs off the UI thread: wait until it has drawn nothing for a while.
sleep 10

moves() { # N DX: N pointer moves of DX pixels, 8 ms apart, in one xdotool call
  local chain=()
  for _ in $(seq 1 "$1"); do chain+=(mousemove_relative -- "$2" 0 sleep 0.008); done
  xdotool "${chain[@]}"
}
section() { # NAME: prints the stats lines written since the last call
  sleep 0.6
  echo "$1:"
  tail -n +$((seen + 1)) "$work/stats" | sed 's/^/  /'
  seen=$(wc -l < "$work/stats")
}
seen=$(wc -l < "$work/stats")
# The timeline's first row sits about 230 px down; double-click fits the whole trace.
x=$((width / 2)); y=240
xdotool mousemove "$x" "$y" click --repeat 2 --delay 80 1
sleep 1
seen=$(wc -l < "$work/stats")
xdotool mousemove "$x" "$y" sleep 0.3 mousedown 1
for _ in 1 2; do moves 100 -2; moves 100 2; done
xdotool mouseup 1
section "panning the whole trace at ${width}x${height}"
xdotool mousemove "$x" $((height - 30))
moves 400 1
section "the frame floor (pointer over empty space) at ${width}x${height}"
