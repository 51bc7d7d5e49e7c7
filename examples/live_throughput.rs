//! How many events a second a live server (`gangway::live::LiveServer`) passes to one watcher
//! that reads as fast as it can, over loopback, before the watcher loses any: events published
//! at a steady rate for 2 s each, the rate raised by a quarter until the watcher's `dropped` count moves (or
//! the publisher itself cannot keep the rate). Prints a Markdown table; the book's measurements
//! page quotes it.
//!
//! `cargo run --release --example live_throughput`

use gangway::live::{Hello, LiveClient, LiveServer, Record, ServeOptions};
use gangway::trace::{Clock, Event, EventKind, Lane};
use std::time::{Duration, Instant};

/// A kernel event as a training step's are: a name of about 30 bytes, ids set.
fn event(i: u64) -> Event {
    Event {
        device: (i % 4) as usize,
        lane: Lane::Compute,
        kind: EventKind::Kernel,
        name: format!("r0 b0 expert weight grads {i}"),
        program: Some(i / 64),
        node: Some((i % 64) as u32),
        microbatch: None,
        start_ns: i * 1_000,
        end_ns: i * 1_000 + 800,
        clock: Clock::Gpu,
        flow: None,
        op: None,
        moved: None,
    }
}

fn main() -> anyhow::Result<()> {
    let server = LiveServer::bind(
        "127.0.0.1:0",
        ServeOptions::default(),
        Hello::for_this_process(),
    )?;
    let mut client = LiveClient::connect(server.local_addr(), None, Duration::from_secs(5))?;
    let (tx, rx) = std::sync::mpsc::channel();
    // The watcher: counts events and keeps the latest dropped total.
    std::thread::spawn(move || {
        let (mut events, mut dropped) = (0u64, 0u64);
        loop {
            match client.recv(Duration::from_millis(50)) {
                Ok(Some(Record::Event { .. })) => events += 1,
                Ok(Some(Record::Dropped { events: d, .. })) => dropped = d,
                Ok(Some(Record::End(_))) | Err(_) => break,
                Ok(_) => {}
            }
            let _ = tx.send((events, dropped));
        }
    });
    println!("| rate asked (events/s) | published (events/s) | received | dropped |");
    println!("| --- | --- | --- | --- |");
    let mut rate = 20_000u64;
    let mut i = 0u64;
    let (mut received, mut dropped) = (0u64, 0u64);
    loop {
        let start = Instant::now();
        let total = rate * 2;
        // Publish in batches of a millisecond's worth, as a job's tracer pump does.
        let batch = (rate / 1000).max(1);
        let mut sent = 0;
        while sent < total {
            let due = start + Duration::from_secs_f64(sent as f64 / rate as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let events: Vec<Event> = (0..batch).map(|k| event(i + k)).collect();
            server.publish_events(0, &events);
            i += batch;
            sent += batch;
        }
        let took = start.elapsed().as_secs_f64();
        // Let the watcher catch up, then read its totals.
        std::thread::sleep(Duration::from_millis(500));
        let before = (received, dropped);
        while let Ok((r, d)) = rx.try_recv() {
            (received, dropped) = (r, d);
        }
        println!(
            "| {rate} | {:.0} | {} | {} |",
            total as f64 / took,
            received - before.0,
            dropped - before.1
        );
        if dropped > before.1 || took > 2.5 || rate >= 10_240_000 {
            break;
        }
        rate = rate * 5 / 4;
    }
    Ok(())
}
