//! Many threads submitting, waiting and mapping on one shared device at once.
//!
//! wgpu-core 30.0.2 panics when two threads run its `Device::maintain` together (a poll, or the
//! maintenance pass at the end of `Queue::submit`): "If the queue is empty, the current
//! submission index (N) should be at least the wait submission index (M)". `Device` serialises
//! those calls (`Device::maintaining`); this test fails within a few rounds without that, and is
//! how to tell whether the workaround can go after a wgpu upgrade.

#![allow(clippy::unwrap_used)]

mod common;

use common::case;
use gangway::Device;

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(device: eight_threads_submit_wait_and_map_on_one_device),
    ])
}

const THREADS: u32 = 8;
const ROUNDS: u32 = 200;
/// Large enough (1 MiB) that copies keep the queue busy and short waits time out, which is when
/// the race shows: a wait reads the fence, times out, and another thread drains the queue.
const WORDS: usize = 1 << 18;

/// One thread's rounds: write a pattern, copy it on the GPU, wait for the device, map the copy.
fn rounds(device: &Device, thread: u32) {
    let src = device
        .storage_buffer("stress src", (WORDS * 4) as u64)
        .unwrap();
    let dst = device
        .storage_buffer("stress dst", (WORDS * 4) as u64)
        .unwrap();
    for round in 0..ROUNDS {
        let want: Vec<u32> = (0..WORDS as u32)
            .map(|i| (thread << 28) ^ (round << 18) ^ i)
            .collect();
        device.write_buffer(&src, 0, bytemuck::cast_slice(&want));
        let mut encoder = device.encoder("stress copy");
        device.serialized(|| encoder.copy_buffer_to_buffer(&src, 0, &dst, 0, (WORDS * 4) as u64));
        let index = device.submit(encoder);
        if round % 2 == 0 {
            device.wait().unwrap();
        } else {
            while !device
                .poll_submission(&index, std::time::Duration::from_millis(1))
                .unwrap()
            {}
        }
        let got: Vec<u32> =
            bytemuck::pod_collect_to_vec(&device.read_buffer(&dst, 0, (WORDS * 4) as u64).unwrap());
        assert!(
            got == want,
            "thread {thread} round {round} on {}: wrong copy",
            device.label()
        );
    }
}

fn eight_threads_submit_wait_and_map_on_one_device(device: &Device) {
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || rounds(device, t));
        }
    });
}
