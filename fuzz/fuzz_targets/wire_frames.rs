//! The worker wire protocol's decoder, Hello exchange included: arbitrary bytes, split at
//! a position the input chooses, must decode or fail with an error, never panic, and a
//! decoded frame must encode back to a frame that decodes to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use talon_core::wire::{Event, FrameDecoder};

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let cut = usize::from(split).min(rest.len());
    let mut decoder = FrameDecoder::new();
    for mut piece in [&rest[..cut], &rest[cut..]] {
        loop {
            match decoder.decode(&mut piece) {
                Ok(Some(Event::Frame(frame))) => {
                    let id = frame.header.request_id();
                    if let Ok(bytes) = frame.message.encode(id) {
                        let mut again = FrameDecoder::new();
                        let mut input = &bytes[..];
                        match again.decode(&mut input) {
                            Ok(Some(Event::Frame(back))) => assert_eq!(back.message, frame.message),
                            other => panic!("re-encoded frame did not decode: {other:?}"),
                        }
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
