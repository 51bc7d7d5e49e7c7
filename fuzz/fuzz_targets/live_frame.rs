//! The live stream's frame decoder (`gangway::live::FrameDecoder`), fed a peer's bytes: any
//! bytes, split anywhere, are records or an error, never a panic; and every record it yields
//! encodes to a frame that decodes back to the same record.
#![no_main]

use gangway::live::FrameDecoder;
use gangway::live::protocol;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks where the bytes are split, as reads from a socket split them.
    let Some((&split, bytes)) = data.split_first() else {
        return;
    };
    let cut = usize::from(split).min(bytes.len());
    let mut decoder = FrameDecoder::new();
    decoder.push(&bytes[..cut]);
    let mut records = Vec::new();
    let mut pushed_rest = false;
    loop {
        match decoder.next_record() {
            Ok(Some(record)) => records.push(record),
            Ok(None) if cut < bytes.len() && !pushed_rest => {
                decoder.push(&bytes[cut..]);
                pushed_rest = true;
            }
            Ok(None) | Err(_) => break,
        }
    }
    for record in records {
        let frame = protocol::encode(&record).expect("a decoded record encodes");
        let mut again = FrameDecoder::new();
        again.push(&frame);
        let back = again.next_record().expect("an encoded record decodes");
        // NaN metric values are equal in bits, not by ==; compare the frames instead.
        let back = back.expect("a whole frame");
        assert_eq!(protocol::encode(&back).ok(), Some(frame));
    }
});
