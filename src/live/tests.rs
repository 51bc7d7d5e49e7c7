//! The protocol's records and framing, and a server and its clients over loopback: every test
//! binds port 0 on 127.0.0.1 and waits a bounded time for anything it expects.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::protocol::{EventRef, HEADER, encode_any};
use super::*;
use crate::Error;
use crate::trace::{EventMeta, Tracer, Track, chrome};

const WAIT: Duration = Duration::from_secs(5);

fn event(i: u64) -> crate::trace::Event {
    EventMeta::kernel((i % 2) as usize).event(format!("matmul {i}"), i * 100, i * 100 + 50)
}

fn hello() -> Hello {
    let mut hello = Hello::for_this_process();
    hello.ranks = 1;
    hello.hosts = vec!["here".into()];
    hello.mesh = vec![MeshAxis {
        name: "data".into(),
        size: 2,
    }];
    hello.devices = (0..2)
        .map(|id| LiveDevice {
            id,
            rank: 0,
            host: "here".into(),
            adapter: "llvmpipe".into(),
            backend: "vulkan".into(),
            track: Track::device(id, format!("llvmpipe #{id}")),
        })
        .collect();
    hello
}

fn serve(options: ServeOptions) -> LiveServer {
    LiveServer::bind("127.0.0.1:0", options, hello()).unwrap()
}

fn connect(server: &LiveServer) -> LiveClient {
    LiveClient::connect(server.local_addr(), None, WAIT).unwrap()
}

/// The next record that is not a heartbeat, failing the test after [`WAIT`].
fn next(client: &mut LiveClient) -> Record {
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "no record within {WAIT:?}");
        match client.recv(WAIT).unwrap() {
            Some(Record::Heartbeat { .. }) | None => {}
            Some(record) => return record,
        }
    }
}

/// A connection that attached by hand, to send what the library's client never would.
fn raw_attach(addr: SocketAddr, protocol: u32, token: Option<&str>) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    let attach = Record::Attach(Attach {
        protocol,
        token: token.map(str::to_string),
        client: Some("test".into()),
    });
    stream
        .write_all(&protocol::encode(&attach).unwrap())
        .unwrap();
    stream
}

/// Every record the server sends until it closes the connection.
fn read_to_close(mut stream: TcpStream) -> Vec<Record> {
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut bytes = Vec::new();
    // A reset after the server's close ends the read as surely as a FIN.
    let _ = stream.read_to_end(&mut bytes);
    let mut decoder = FrameDecoder::new();
    decoder.push(&bytes);
    let mut records = Vec::new();
    while let Some(record) = decoder.next_record().unwrap() {
        records.push(record);
    }
    assert_eq!(decoder.pending(), 0, "a partial frame at the end");
    records
}

fn every_record() -> Vec<Record> {
    vec![
        Record::Attach(Attach {
            protocol: 1,
            token: Some("ab12".into()),
            client: None,
        }),
        Record::Refused {
            reason: "wrong token".into(),
        },
        Record::Hello(hello()),
        Record::Event {
            rank: 3,
            event: event(7),
        },
        Record::Metric(
            Metric::now("train/expert_load", 0.25)
                .at_step(12)
                .label("expert", "3"),
        ),
        Record::Dropped {
            events: 10,
            metrics: 1,
        },
        Record::End(End::error(1, "device 0 was lost")),
        Record::End(End::ok()),
        Record::Heartbeat { t_ns: 99 },
    ]
}

fn decode_one(frame: &[u8]) -> crate::Result<Option<Record>> {
    let mut decoder = FrameDecoder::new();
    decoder.push(frame);
    decoder.next_record()
}

#[test]
fn every_record_round_trips_through_a_frame() {
    let mut decoder = FrameDecoder::new();
    for record in every_record() {
        let frame = protocol::encode(&record).unwrap();
        let len = u32::from_be_bytes(frame[..HEADER].try_into().unwrap()) as usize;
        assert_eq!(len, frame.len() - HEADER);
        let json: serde_json::Value = serde_json::from_slice(&frame[HEADER..]).unwrap();
        assert_eq!(json["type"], record.kind());
        // Byte by byte: a decoder fed in pieces yields nothing until the frame is whole.
        for (i, b) in frame.iter().enumerate() {
            assert!(decoder.next_record().unwrap().is_none());
            decoder.push(std::slice::from_ref(b));
            assert_eq!(decoder.pending(), i + 1);
        }
        assert_eq!(decoder.next_record().unwrap(), Some(record));
        assert_eq!(decoder.pending(), 0);
    }
}

#[test]
fn a_borrowed_event_encodes_as_the_record_does() {
    let e = event(3);
    let borrowed = encode_any(&EventRef { rank: 2, event: &e }).unwrap();
    let owned = protocol::encode(&Record::Event { rank: 2, event: e }).unwrap();
    assert_eq!(borrowed, owned);
}

#[test]
fn metric_values_json_cannot_hold_travel_as_text() {
    for (value, text) in [
        (f64::NAN, "\"NaN\""),
        (f64::INFINITY, "\"Infinity\""),
        (f64::NEG_INFINITY, "\"-Infinity\""),
    ] {
        let frame = protocol::encode(&Record::Metric(Metric::now("train/loss", value))).unwrap();
        let json = std::str::from_utf8(&frame[HEADER..]).unwrap();
        assert!(json.contains(&format!("\"value\":{text}")), "{json}");
        let Some(Record::Metric(m)) = decode_one(&frame).unwrap() else {
            panic!("not a metric");
        };
        assert_eq!(m.value.to_bits(), value.to_bits(), "{value}");
    }
    let text = br#"{"type":"metric","name":"x","value":"big","t_ns":0}"#;
    assert!(protocol::decode_payload(text).is_err());
}

#[test]
fn a_reader_ignores_fields_it_does_not_know_and_fills_optional_ones() {
    let text = br#"{"type":"metric","name":"train/loss","value":2.5,"t_ns":7,"future":[1]}"#;
    let record = protocol::decode_payload(text).unwrap();
    let expected = Metric {
        name: "train/loss".into(),
        step: None,
        value: 2.5,
        t_ns: 7,
        labels: BTreeMap::new(),
    };
    assert_eq!(record, Record::Metric(expected));
    let text = br#"{"type":"dropped","events":4}"#;
    assert_eq!(
        protocol::decode_payload(text).unwrap(),
        Record::Dropped {
            events: 4,
            metrics: 0
        }
    );
}

fn frame_of(payload: &[u8]) -> Vec<u8> {
    let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(payload);
    frame
}

fn is_bad_frame(r: crate::Result<Option<Record>>) -> bool {
    matches!(r, Err(Error::Live(LiveError::BadFrame { .. })))
}

#[test]
fn the_decoder_refuses_bad_frames() {
    assert!(is_bad_frame(decode_one(&[0, 0, 0, 0])), "zero length");
    let over = ((MAX_FRAME + 1) as u32).to_be_bytes();
    assert!(
        is_bad_frame(decode_one(&over)),
        "over the limit, before its payload"
    );
    assert!(is_bad_frame(decode_one(&[0xff; 4])));
    assert!(
        is_bad_frame(decode_one(&frame_of(&[0xc3, 0x28]))),
        "not UTF-8"
    );
    assert!(is_bad_frame(decode_one(&frame_of(b"not json"))));
    assert!(
        is_bad_frame(decode_one(&frame_of(b"[1,2]"))),
        "not an object"
    );
    assert!(
        is_bad_frame(decode_one(&frame_of(br#"{"type":"shout"}"#))),
        "unknown type"
    );
    assert!(
        is_bad_frame(decode_one(&frame_of(br#"{"type":"end"}"#))),
        "missing fields"
    );
    assert!(is_bad_frame(decode_one(&frame_of(b"{}"))), "no type");
    // A truncated frame is not an error yet: the rest may still come.
    let whole = protocol::encode(&Record::Heartbeat { t_ns: 1 }).unwrap();
    let mut decoder = FrameDecoder::new();
    decoder.push(&whole[..whole.len() - 1]);
    assert_eq!(decoder.next_record().unwrap(), None);
    assert_eq!(decoder.pending(), whole.len() - 1);
    // The largest frame allowed is accepted.
    let pad = "x".repeat(MAX_FRAME - 40);
    let big = format!(r#"{{"type":"refused","reason":"{pad}"}}"#);
    assert!(big.len() <= MAX_FRAME);
    assert!(decode_one(&frame_of(big.as_bytes())).unwrap().is_some());
    let too_big = Record::Refused {
        reason: "x".repeat(MAX_FRAME),
    };
    assert!(
        protocol::encode(&too_big).is_err(),
        "the encoder keeps the limit too"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_bytes_decode_to_records_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..256),
                                               cut in 0usize..256) {
        let mut decoder = FrameDecoder::new();
        let cut = cut.min(bytes.len());
        decoder.push(&bytes[..cut]);
        decoder.push(&bytes[cut..]);
        while let Ok(Some(_)) = decoder.next_record() {}
    }

    #[test]
    fn any_payload_in_a_valid_frame_decodes_or_errs(payload in "\\PC{1,64}") {
        let _ = decode_one(&frame_of(payload.as_bytes()));
    }
}

#[test]
fn tokens_are_32_hex_digits_and_differ() {
    let (a, b) = (generate_token(), generate_token());
    assert_eq!(a.len(), 32);
    assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(a, b);
    assert!(tokens_match(&a, &a.clone()));
    assert!(!tokens_match(&a, &b) && !tokens_match(&a, &a[1..]));
}

#[test]
fn an_open_address_needs_a_token() {
    let err = LiveServer::bind("0.0.0.0:0", ServeOptions::default(), hello()).unwrap_err();
    assert!(
        matches!(err, Error::Live(LiveError::TokenNeeded { .. })),
        "{err}"
    );
    let empty = ServeOptions {
        token: Some(String::new()),
        ..ServeOptions::default()
    };
    assert!(
        LiveServer::bind("0.0.0.0:0", empty, hello()).is_err(),
        "an empty token is none"
    );
}

#[test]
fn a_client_gets_the_hello_then_what_is_published_then_the_end() {
    let server = serve(ServeOptions::default());
    let mut client = connect(&server);
    assert_eq!(client.hello(), &hello());
    server.publish_event(1, &event(1));
    server.publish_metric(Metric::now("train/loss", 3.5).at_step(1));
    assert_eq!(
        next(&mut client),
        Record::Event {
            rank: 1,
            event: event(1)
        }
    );
    assert!(matches!(next(&mut client), Record::Metric(m) if m.value == 3.5));
    server.finish(End::ok());
    assert_eq!(next(&mut client), Record::End(End::ok()));
    let err = client.recv(WAIT).unwrap_err();
    assert!(
        matches!(err, Error::Live(LiveError::Closed { .. })),
        "{err}"
    );
    server.publish_event(0, &event(2)); // after the end: goes nowhere, and does not fail
}

#[test]
fn a_late_client_gets_the_metric_history_and_recent_events_first() {
    let server = serve(ServeOptions::default());
    for step in 0..10 {
        server.publish_metric(Metric::now("train/loss", step as f64).at_step(step));
    }
    let events: Vec<_> = (0..50).map(event).collect();
    server.publish_events(0, &events);
    let mut recording = Recording::new(hello());
    let mut client = connect(&server);
    for _ in 0..60 {
        recording.push(next(&mut client));
    }
    server.publish_event(0, &event(50));
    recording.push(next(&mut client));
    let steps: Vec<_> = recording.series("train/loss").map(|m| m.step).collect();
    assert_eq!(steps, (0..10).map(Some).collect::<Vec<_>>());
    assert_eq!(recording.events, (0..51).map(event).collect::<Vec<_>>());
    assert_eq!(recording.event_ranks, vec![0; 51]);
}

#[test]
fn history_keeps_its_count_and_age_bounds() {
    let server = serve(ServeOptions {
        history_events: 100,
        history_metrics: 10,
        ..ServeOptions::default()
    });
    server.publish_events(0, &(0..1000).map(event).collect::<Vec<_>>());
    for i in 0..30 {
        server.publish_metric(Metric::now("m", i as f64));
    }
    assert_eq!(server.history_len(), (100, 10));
    let brief = serve(ServeOptions {
        event_history: Duration::ZERO,
        ..ServeOptions::default()
    });
    brief.publish_event(0, &event(0));
    std::thread::sleep(Duration::from_millis(5));
    brief.publish_event(0, &event(1));
    assert_eq!(brief.history_len().0, 1, "older than the window: forgotten");
}

#[test]
fn a_client_that_never_reads_slows_nothing_and_is_told_what_it_lost() {
    let buffer = 1_000;
    let server = serve(ServeOptions {
        client_buffer: buffer,
        ..ServeOptions::default()
    });
    let events: Vec<_> = (0..200_000).map(event).collect();
    let publish = |server: &LiveServer| {
        let started = Instant::now();
        for e in &events {
            server.publish_event(0, e);
        }
        started.elapsed()
    };
    // The same events to a server with no client: serialising is most of the cost (about 7 µs
    // an event in a debug build, well under 1 µs in a release one).
    let alone = publish(&serve(ServeOptions::default()));
    let mut client = connect(&server);
    let took = publish(&server);
    eprintln!("200k events: {took:?} with a client that does not read, {alone:?} with none");
    assert!(
        took < alone * 2 + Duration::from_millis(500),
        "a client that does not read slowed publishing: {took:?} against {alone:?}"
    );
    let queued = server.queued();
    assert_eq!(queued.len(), 1);
    assert!(queued[0] <= buffer, "{queued:?}");
    server.publish_metric(Metric::now("train/loss", 1.0));
    // Now read: what was queued, then a count of what was lost.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut recording = Recording::new(client.hello().clone());
    while recording.dropped_events == 0 || recording.metrics.is_empty() {
        assert!(Instant::now() < deadline, "no dropped record");
        if let Some(record) = client.recv(WAIT).unwrap() {
            recording.push(record);
        }
    }
    let got = recording.events.len() as u64;
    assert!(recording.dropped_events > 0);
    assert!(got + recording.dropped_events <= 200_000);
    assert_eq!(
        recording.dropped_metrics, 0,
        "metrics have their own budget"
    );
    server.finish(End::ok());
    client.record_until_end(&mut recording).unwrap();
    assert_eq!(recording.end, Some(End::ok()));
    assert_eq!(
        recording.events.len() as u64 + recording.dropped_events,
        200_000,
        "every event either came or was counted lost"
    );
}

#[test]
fn a_wrong_or_missing_token_gets_refused_and_nothing_else() {
    let token = generate_token();
    let server = serve(ServeOptions {
        token: Some(token.clone()),
        ..ServeOptions::default()
    });
    server.publish_metric(Metric::now("secret", 1.0));
    for given in [Some("0123"), None] {
        let records = read_to_close(raw_attach(server.local_addr(), 1, given));
        assert_eq!(records.len(), 1, "{records:?}");
        assert!(matches!(&records[0], Record::Refused { .. }), "{records:?}");
    }
    let err = LiveClient::connect(server.local_addr(), Some("nope"), WAIT).unwrap_err();
    assert!(
        matches!(err, Error::Live(LiveError::Refused { .. })),
        "{err}"
    );
    let client = LiveClient::connect(server.local_addr(), Some(&token), WAIT).unwrap();
    assert_eq!(client.hello().producer, "gangway");
}

#[test]
fn another_protocol_major_is_refused() {
    let server = serve(ServeOptions::default());
    let records = read_to_close(raw_attach(server.local_addr(), 2, None));
    assert!(
        matches!(&records[..], [Record::Refused { reason }] if reason.contains("protocol 2")),
        "{records:?}"
    );
}

#[test]
fn a_client_sending_garbage_is_closed_and_others_are_served() {
    let server = serve(ServeOptions::default());
    let mut good = connect(&server);
    let mut http = TcpStream::connect(server.local_addr()).unwrap();
    http.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(
        read_to_close(http).is_empty(),
        "nothing is sent before an attach"
    );
    let late = raw_attach(server.local_addr(), 1, None);
    let mut chatty = late.try_clone().unwrap();
    chatty.set_read_timeout(Some(WAIT)).unwrap();
    let mut first = [0u8; HEADER];
    chatty.read_exact(&mut first).unwrap(); // the hello has started: it is attached
    chatty.write_all(b"more").unwrap();
    let deadline = Instant::now() + WAIT;
    while server.client_count() > 1 {
        assert!(
            Instant::now() < deadline,
            "a client that wrote after attaching stays"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    server.publish_metric(Metric::now("train/loss", 2.0));
    assert!(matches!(next(&mut good), Record::Metric(_)));
}

#[test]
fn beyond_max_clients_a_client_is_refused() {
    let server = serve(ServeOptions {
        max_clients: 1,
        ..ServeOptions::default()
    });
    let _first = connect(&server);
    let err = LiveClient::connect(server.local_addr(), None, WAIT).unwrap_err();
    assert!(
        matches!(err, Error::Live(LiveError::Refused { .. })),
        "{err}"
    );
}

#[test]
fn an_idle_stream_has_heartbeats() {
    let server = serve(ServeOptions::default());
    let mut client = connect(&server);
    let record = client.recv(Duration::from_secs(3)).unwrap();
    assert!(
        matches!(record, Some(Record::Heartbeat { .. })),
        "{record:?}"
    );
    assert_eq!(client.recv(Duration::ZERO).unwrap(), None);
}

#[test]
fn a_silent_connection_is_closed_after_the_handshake_timeout() {
    let server = serve(ServeOptions::default());
    let silent = TcpStream::connect(server.local_addr()).unwrap();
    let started = Instant::now();
    assert!(read_to_close(silent).is_empty());
    let waited = started.elapsed();
    assert!(
        waited >= server::HANDSHAKE_TIMEOUT - Duration::from_millis(200),
        "{waited:?}"
    );
}

#[test]
fn dropping_the_server_closes_everything() {
    let server = serve(ServeOptions::default());
    let addr = server.local_addr();
    let mut client = connect(&server);
    let started = Instant::now();
    drop(server);
    assert!(started.elapsed() < Duration::from_secs(2));
    let err = loop {
        match client.recv(WAIT) {
            Ok(Some(Record::Heartbeat { .. })) => {}
            Ok(other) => panic!("{other:?}"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(
            err,
            Error::Live(LiveError::Closed { .. }) | Error::Live(LiveError::Io { .. })
        ),
        "{err}"
    );
    assert!(
        TcpStream::connect_timeout(&addr, WAIT).is_err(),
        "still listening"
    );
}

#[test]
fn a_tracers_events_are_streamed_and_save_as_a_chrome_trace() {
    let server = serve(ServeOptions::default());
    let tracer = Tracer::new();
    server.attach_tracer(0, &tracer).unwrap();
    let mut client = connect(&server);
    for i in 0..5 {
        tracer.emit(event(i));
    }
    let mut recording = Recording::new(client.hello().clone());
    while recording.events.len() < 5 {
        recording.push(next(&mut client));
    }
    server.finish(End::error(3, "out of memory"));
    client.record_until_end(&mut recording).unwrap();
    assert_eq!(recording.end.as_ref().map(|e| e.exit_code), Some(3));
    let trace = chrome::parse_slice(recording.to_chrome_trace().as_bytes()).unwrap();
    assert_eq!(trace.events.len(), 5);
    assert_eq!(trace.tracks[1].label, "llvmpipe #1");
}

#[test]
fn the_server_can_be_shared_and_debug_prints_no_token() {
    fn shared<T: Send + Sync>() {}
    shared::<LiveServer>();
    let options = ServeOptions {
        token: Some("secret-token".into()),
        ..ServeOptions::default()
    };
    assert!(!format!("{options:?}").contains("secret-token"));
}
