//! The aws-chunked decoder, unsigned and with trailers, fed in pieces the input chooses:
//! it must never panic, never emit more than the announced length, and a body it accepts
//! decodes to exactly the announced length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use talon_protocols::checksum::ChecksumAlgorithm;
use talon_protocols::s3::chunked::{AwsChunkedDecoder, ChunkSigning};

fuzz_target!(|data: &[u8]| {
    let Some((&control, body)) = data.split_first() else {
        return;
    };
    let announced = u64::from(control & 0x3F) * 7;
    let (signing, trailer) = if control & 0x40 != 0 {
        (ChunkSigning::Unsigned, Some(ChecksumAlgorithm::Crc32))
    } else {
        (ChunkSigning::Unverified, None)
    };
    let step = usize::from(control >> 7) * 3 + 1;
    let mut decoder = AwsChunkedDecoder::new(signing, trailer, Some(announced));
    let mut out = Vec::new();
    for piece in body.chunks(step) {
        if decoder.feed(piece, &mut out).is_err() {
            return;
        }
        assert!(out.len() as u64 <= announced, "decoded past the announced length");
    }
    if let Ok(summary) = decoder.finish() {
        assert_eq!(summary.decoded_len, announced);
        assert_eq!(out.len() as u64, announced);
    }
});
