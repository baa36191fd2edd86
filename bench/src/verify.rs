//! Checking every response of the gateway benches against the bytes the
//! origin stub generates.
//!
//! The benches read generated objects
//! ([`GeneratedObject`](talon_origin_stub::generated::GeneratedObject)),
//! whose content is a pure function of bucket, key and seed. Before a run,
//! [`ExpectedRanges`] computes the SHA-256 of every aligned range a run may
//! ask for; each response is then checked for its status, its
//! `Content-Length` and `Content-Range`, its body length and the SHA-256 of
//! its body ([`check_response`]). A response that fails is described
//! verbatim (status line, headers, the start of the body) so the run can
//! print it. [`StreamCheck`] does the same for one long body read
//! incrementally.

use std::ops::Range;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use talon_origin_stub::generated::GeneratedObject;

/// Most body bytes quoted when a response is described.
const QUOTE_LIMIT: usize = 2048;

/// The aligned ranges of an object a run reads, with their SHA-256.
#[derive(Debug, Clone)]
pub struct ExpectedRanges {
    object: GeneratedObject,
    range_size: u64,
    digests: Vec<[u8; 32]>,
    /// Asked as whole GETs (no range; 200) rather than ranged ones.
    whole: bool,
    /// A set of objects read whole ([`ExpectedRanges::whole_objects`]): "range" `k`
    /// is the whole of `set[k]`; empty otherwise.
    set: Vec<GeneratedObject>,
}

impl ExpectedRanges {
    /// Ranges `[k * range_size, min((k + 1) * range_size, size))` of
    /// `object` for every `k`; their digests are computed now (a 64 MiB
    /// object takes a fraction of a second).
    pub fn new(object: GeneratedObject, range_size: u64) -> ExpectedRanges {
        let range_size = range_size.max(1);
        let count = object.size.div_ceil(range_size);
        let mut buf = vec![0u8; usize::try_from(range_size.min(object.size)).unwrap_or(0)];
        let digests = (0..count)
            .map(|k| {
                let start = k * range_size;
                let len = (object.size - start).min(range_size) as usize;
                object.fill(start, &mut buf[..len]);
                Sha256::digest(&buf[..len]).into()
            })
            .collect();
        ExpectedRanges {
            object,
            range_size,
            digests,
            whole: false,
            set: Vec::new(),
        }
    }

    /// Each of `objects` read whole with a plain GET (answered 200): "range" `k` is
    /// object `k`, whose key the request names ([`Expectation::key`]). The
    /// small-object workload over distinct objects. None for an empty list.
    pub fn whole_objects(objects: Vec<GeneratedObject>) -> Option<ExpectedRanges> {
        let first = objects.first()?.clone();
        let mut buf = Vec::new();
        let digests = objects
            .iter()
            .map(|o| {
                buf.resize(usize::try_from(o.size).unwrap_or(0), 0);
                o.fill(0, &mut buf);
                Sha256::digest(&buf).into()
            })
            .collect();
        Some(ExpectedRanges {
            range_size: objects.iter().map(|o| o.size).max().unwrap_or(0),
            object: first,
            digests,
            whole: true,
            set: objects,
        })
    }

    /// The whole `object` as one "range", asked with a plain GET (no `Range` header)
    /// and answered 200: the small-object workload.
    pub fn whole_object(object: GeneratedObject) -> ExpectedRanges {
        let size = object.size;
        ExpectedRanges {
            whole: true,
            ..ExpectedRanges::new(object, size)
        }
    }

    /// Whether requests are whole GETs ([`ExpectedRanges::whole_object`]).
    pub fn is_whole(&self) -> bool {
        self.whole
    }

    /// The object (a set's first).
    pub fn object(&self) -> &GeneratedObject {
        &self.object
    }

    /// Bytes per range (the last may be shorter).
    pub fn range_size(&self) -> u64 {
        self.range_size
    }

    /// How many ranges there are.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Whether the object is empty.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// Range `k`'s bytes (of a set: the whole of object `k`).
    pub fn range(&self, k: usize) -> Range<u64> {
        if !self.set.is_empty() {
            return 0..self.set.get(k).map_or(0, |o| o.size);
        }
        let start = k as u64 * self.range_size;
        start..(start + self.range_size).min(self.object.size)
    }

    /// What a GET of range `k` must answer (a whole GET's: 200).
    pub fn expect_range(&self, k: usize) -> Expectation {
        let r = self.range(k);
        if let Some(object) = self.set.get(k) {
            return Expectation {
                status: StatusCode::OK,
                range: r,
                object_size: object.size,
                sha256: self.digests.get(k).copied().unwrap_or_default(),
                key: Some(object.key.clone()),
                object: Some(object.clone()),
            };
        }
        Expectation {
            status: if self.whole {
                StatusCode::OK
            } else {
                StatusCode::PARTIAL_CONTENT
            },
            range: r,
            object_size: self.object.size,
            sha256: self.digests.get(k).copied().unwrap_or_default(),
            key: None,
            object: Some(self.object.clone()),
        }
    }
}

/// What one response must be.
#[derive(Debug, Clone)]
pub struct Expectation {
    /// The status (206 for a range, 200 for the whole object).
    pub status: StatusCode,
    /// The bytes of the object the body must hold.
    pub range: Range<u64>,
    /// The object's size (for `Content-Range`).
    pub object_size: u64,
    /// SHA-256 of the body.
    pub sha256: [u8; 32],
    /// The key to ask for, where it is not the load's target's (a set of objects).
    pub key: Option<String>,
    /// The object, to locate the first wrong byte in a failure report.
    pub object: Option<GeneratedObject>,
}

/// A response as received: status, headers, body chunks.
#[derive(Debug, Clone)]
pub struct Received<'a> {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// The body, in the chunks it arrived in.
    pub body: &'a [Bytes],
    /// SHA-256 of the body, computed while it arrived.
    pub sha256: [u8; 32],
}

impl Received<'_> {
    fn body_len(&self) -> u64 {
        self.body.iter().map(|b| b.len() as u64).sum()
    }

    /// The response as text: status line, headers, the start of the body.
    pub fn describe(&self) -> String {
        let mut out = format!("HTTP/1.1 {}\n", self.status);
        for (name, value) in self.headers {
            out.push_str(&format!(
                "{name}: {}\n",
                String::from_utf8_lossy(value.as_bytes())
            ));
        }
        out.push('\n');
        let mut quoted = Vec::new();
        for chunk in self.body {
            let room = QUOTE_LIMIT - quoted.len();
            quoted.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if quoted.len() >= QUOTE_LIMIT {
                break;
            }
        }
        let printable = quoted
            .iter()
            .all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace());
        if printable {
            out.push_str(&String::from_utf8_lossy(&quoted));
        } else {
            out.push_str(&format!(
                "<{} binary body bytes; first {}: {}>",
                self.body_len(),
                quoted.len().min(32),
                hex::encode(&quoted[..quoted.len().min(32)])
            ));
        }
        if self.body_len() > quoted.len() as u64 && printable {
            out.push_str(&format!("\n<… {} bytes in all>", self.body_len()));
        }
        out
    }
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The offset (within the body) of the first byte that differs from the
/// object's, if any (regenerates the expected bytes; for failure reports).
fn first_wrong_byte(object: &GeneratedObject, start: u64, body: &[Bytes]) -> Option<u64> {
    let mut offset = 0u64;
    let mut expected = Vec::new();
    for chunk in body {
        expected.resize(chunk.len(), 0);
        object.fill(start + offset, &mut expected);
        if let Some(i) = chunk.iter().zip(&expected).position(|(a, b)| a != b) {
            return Some(offset + i as u64);
        }
        offset += chunk.len() as u64;
    }
    None
}

/// Checks a response. On failure the error says what is wrong, then quotes
/// the response.
pub fn check_response(expect: &Expectation, got: &Received<'_>) -> Result<(), String> {
    let fail = |why: String| Err(format!("{why}; the response:\n{}", got.describe()));
    let want_len = expect.range.end - expect.range.start;
    if got.status != expect.status {
        return fail(format!(
            "status {} where {} was expected",
            got.status.as_u16(),
            expect.status.as_u16()
        ));
    }
    match header(got.headers, "content-length").map(str::parse::<u64>) {
        Some(Ok(n)) if n == want_len => {}
        None => {}
        Some(other) => {
            return fail(format!(
                "Content-Length {other:?} where {want_len} was expected"
            ));
        }
    }
    if expect.status == StatusCode::PARTIAL_CONTENT {
        let want = format!(
            "bytes {}-{}/{}",
            expect.range.start,
            expect.range.end.saturating_sub(1),
            expect.object_size
        );
        if header(got.headers, "content-range") != Some(want.as_str()) {
            return fail(format!("Content-Range is not '{want}'"));
        }
    }
    let len = got.body_len();
    if len != want_len {
        return fail(format!("{len} body bytes where {want_len} were expected"));
    }
    if got.sha256 != expect.sha256 {
        let wrong = expect
            .object
            .as_ref()
            .and_then(|o| first_wrong_byte(o, expect.range.start, got.body))
            .map(|i| {
                format!(
                    " (first wrong byte at body offset {i}, object offset {})",
                    expect.range.start + i
                )
            })
            .unwrap_or_default();
        return fail(format!(
            "body SHA-256 {} where {} was expected{wrong}",
            hex::encode(got.sha256),
            hex::encode(expect.sha256)
        ));
    }
    Ok(())
}

/// Checks one long body as it arrives: every byte is compared with the
/// object's, and the body is hashed. The object's own digest is computed
/// only for a body that differs (for the error): where every byte matched,
/// it is the body's, and hashing both sides would double the client's cost
/// (on a small host the client's CPU is part of what a fast arm measures).
#[derive(Debug)]
pub struct StreamCheck {
    object: GeneratedObject,
    start: u64,
    received: u64,
    first_wrong: Option<u64>,
    got: Sha256,
    scratch: Vec<u8>,
}

impl StreamCheck {
    /// A body that starts at `start` of `object`.
    pub fn new(object: GeneratedObject, start: u64) -> StreamCheck {
        StreamCheck {
            object,
            start,
            received: 0,
            first_wrong: None,
            got: Sha256::new(),
            scratch: Vec::new(),
        }
    }

    /// Takes the next bytes of the body.
    pub fn update(&mut self, chunk: &[u8]) {
        let at = self.start + self.received;
        let room = self.object.size.saturating_sub(at);
        let comparable = (chunk.len() as u64).min(room) as usize;
        if self.first_wrong.is_none() {
            self.scratch.resize(comparable, 0);
            self.object.fill(at, &mut self.scratch);
            if chunk[..comparable] != self.scratch[..] {
                let i = chunk[..comparable]
                    .iter()
                    .zip(&self.scratch)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                self.first_wrong = Some(self.received + i as u64);
            } else if comparable < chunk.len() {
                self.first_wrong = Some(self.received + comparable as u64);
            }
        }
        self.got.update(chunk);
        self.received += chunk.len() as u64;
    }

    /// Bytes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The verdict on what was received: `Err` names the first wrong byte
    /// and both digests.
    pub fn finish(self) -> Result<StreamVerdict, String> {
        let got = hex::encode(self.got.finalize());
        let Some(first) = self.first_wrong else {
            return Ok(StreamVerdict {
                bytes: self.received,
                sha256: got,
            });
        };
        // The object's bytes over the same span, hashed for the message.
        let mut want = Sha256::new();
        let end = (self.start + self.received).min(self.object.size);
        let mut buf = vec![0u8; 1 << 20];
        let mut at = self.start;
        while at < end {
            let n = ((end - at) as usize).min(buf.len());
            self.object.fill(at, &mut buf[..n]);
            want.update(&buf[..n]);
            at += n as u64;
        }
        let want = hex::encode(want.finalize());
        Err(format!(
            "the body differs from the object: {} bytes received from offset {}, SHA-256 \
             {got} where {want} was expected; first wrong byte at body offset {first}",
            self.received, self.start
        ))
    }
}

/// What a stream check accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamVerdict {
    /// Bytes received and checked.
    pub bytes: u64,
    /// Their SHA-256, hex.
    pub sha256: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object() -> GeneratedObject {
        GeneratedObject::new("bench", "v.bin", (3 << 20) + 123, 5)
    }

    fn bytes(o: &GeneratedObject, r: Range<u64>) -> Vec<u8> {
        let mut v = vec![0u8; (r.end - r.start) as usize];
        o.fill(r.start, &mut v);
        v
    }

    #[test]
    fn a_whole_object_is_one_range_answered_200() {
        let o = GeneratedObject::new("bench", "small.bin", 4096, 9);
        let whole = ExpectedRanges::whole_object(o.clone());
        assert!(whole.is_whole());
        assert_eq!(whole.len(), 1);
        let e = whole.expect_range(0);
        assert_eq!((e.status, e.range.clone()), (StatusCode::OK, 0..4096));
        assert_eq!(
            e.sha256,
            <[u8; 32]>::from(Sha256::digest(bytes(&o, 0..4096)))
        );
        let ranged = ExpectedRanges::new(o, 4096);
        assert!(!ranged.is_whole());
        assert_eq!(ranged.expect_range(0).status, StatusCode::PARTIAL_CONTENT);
    }

    #[test]
    fn a_set_of_objects_is_one_whole_object_each_named_by_its_key() {
        let objects: Vec<GeneratedObject> = (0..3)
            .map(|i| GeneratedObject::new("bench", format!("small/{i}"), 4096 + i, 7))
            .collect();
        let set = ExpectedRanges::whole_objects(objects.clone())
            .unwrap_or_else(|| panic!("a set of three"));
        assert!(set.is_whole());
        assert_eq!(set.len(), 3);
        for (k, o) in objects.iter().enumerate() {
            let e = set.expect_range(k);
            assert_eq!(e.status, StatusCode::OK);
            assert_eq!(e.key.as_deref(), Some(o.key.as_str()));
            assert_eq!((e.range.clone(), e.object_size), (0..o.size, o.size));
            assert_eq!(
                e.sha256,
                <[u8; 32]>::from(Sha256::digest(bytes(o, 0..o.size)))
            );
        }
        // The objects differ, so a body of one checked as another fails.
        assert_ne!(set.expect_range(0).sha256, set.expect_range(1).sha256);
        assert!(ExpectedRanges::whole_objects(Vec::new()).is_none());
        assert_eq!(
            ExpectedRanges::whole_object(objects[0].clone())
                .expect_range(0)
                .key,
            None
        );
    }

    fn headers(pairs: &[(&str, String)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap_or_else(|e| panic!("{e}")),
                v.parse().unwrap_or_else(|e| panic!("{e}")),
            );
        }
        h
    }

    /// The response a correct server gives for range `k`, split into chunks.
    fn good(exp: &ExpectedRanges, k: usize) -> (HeaderMap, Vec<Bytes>) {
        let r = exp.range(k);
        let body = bytes(exp.object(), r.clone());
        let h = headers(&[
            ("content-length", body.len().to_string()),
            (
                "content-range",
                format!("bytes {}-{}/{}", r.start, r.end - 1, exp.object().size),
            ),
        ]);
        let chunks = body.chunks(100_000).map(Bytes::copy_from_slice).collect();
        (h, chunks)
    }

    fn digest(chunks: &[Bytes]) -> [u8; 32] {
        let mut h = Sha256::new();
        for c in chunks {
            h.update(c);
        }
        h.finalize().into()
    }

    #[test]
    fn ranges_cover_the_object_and_the_last_is_short() {
        let exp = ExpectedRanges::new(object(), 1 << 20);
        assert_eq!(exp.len(), 4);
        assert_eq!(exp.range(0), 0..1 << 20);
        assert_eq!(exp.range(3), 3 << 20..(3 << 20) + 123);
        let e = exp.expect_range(3);
        let want: [u8; 32] = Sha256::digest(bytes(exp.object(), e.range.clone())).into();
        assert_eq!(e.sha256, want);
    }

    #[test]
    fn a_correct_response_passes() {
        let exp = ExpectedRanges::new(object(), 1 << 20);
        for k in 0..exp.len() {
            let (h, body) = good(&exp, k);
            let got = Received {
                status: StatusCode::PARTIAL_CONTENT,
                headers: &h,
                body: &body,
                sha256: digest(&body),
            };
            assert_eq!(check_response(&exp.expect_range(k), &got), Ok(()));
        }
    }

    #[test]
    fn a_corrupted_body_is_rejected_with_the_wrong_byte() {
        let exp = ExpectedRanges::new(object(), 1 << 20);
        let (h, mut body) = good(&exp, 1);
        let mut third = body[2].to_vec();
        third[17] ^= 0x01;
        body[2] = Bytes::from(third);
        let got = Received {
            status: StatusCode::PARTIAL_CONTENT,
            headers: &h,
            body: &body,
            sha256: digest(&body),
        };
        let err = check_response(&exp.expect_range(1), &got)
            .err()
            .unwrap_or_else(|| panic!("accepted a corrupted body"));
        assert!(err.contains("SHA-256"), "{err}");
        assert!(err.contains("body offset 200017"), "{err}");
        assert!(
            err.contains(&format!("object offset {}", (1 << 20) + 200_017)),
            "{err}"
        );
    }

    #[test]
    fn wrong_status_length_or_range_is_rejected_and_quoted() {
        let exp = ExpectedRanges::new(object(), 1 << 20);
        let (h, body) = good(&exp, 0);
        let sha = digest(&body);
        // Status.
        let xml = [Bytes::from_static(b"<Error><Code>SlowDown</Code></Error>")];
        let err = check_response(
            &exp.expect_range(0),
            &Received {
                status: StatusCode::SERVICE_UNAVAILABLE,
                headers: &HeaderMap::new(),
                body: &xml,
                sha256: digest(&xml),
            },
        )
        .err()
        .unwrap_or_else(|| panic!("accepted a 503"));
        assert!(err.contains("status 503 where 206"), "{err}");
        assert!(
            err.contains("<Code>SlowDown</Code>"),
            "the body is quoted: {err}"
        );
        // Short body.
        let short = &body[..body.len() - 1];
        let err = check_response(
            &exp.expect_range(0),
            &Received {
                status: StatusCode::PARTIAL_CONTENT,
                headers: &h,
                body: short,
                sha256: digest(short),
            },
        )
        .err()
        .unwrap_or_else(|| panic!("accepted a short body"));
        assert!(err.contains("body bytes where 1048576"), "{err}");
        // Another range's Content-Range.
        let (h1, _) = good(&exp, 1);
        let err = check_response(
            &exp.expect_range(0),
            &Received {
                status: StatusCode::PARTIAL_CONTENT,
                headers: &h1,
                body: &body,
                sha256: sha,
            },
        )
        .err()
        .unwrap_or_else(|| panic!("accepted the wrong Content-Range"));
        assert!(err.contains("Content-Range"), "{err}");
        // Another range's bytes (right length, right headers).
        let (_, other) = good(&exp, 2);
        let err = check_response(
            &exp.expect_range(0),
            &Received {
                status: StatusCode::PARTIAL_CONTENT,
                headers: &h,
                body: &other,
                sha256: digest(&other),
            },
        )
        .err()
        .unwrap_or_else(|| panic!("accepted another range's bytes"));
        assert!(err.contains("binary body bytes"), "{err}");
    }

    #[test]
    fn a_stream_check_finds_the_first_wrong_byte() {
        let o = object();
        let all = bytes(&o, 1000..3_000_000);
        let mut ok = StreamCheck::new(o.clone(), 1000);
        for c in all.chunks(77_777) {
            ok.update(c);
        }
        let v = ok.finish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v.bytes, all.len() as u64);
        assert_eq!(v.sha256, hex::encode(Sha256::digest(&all)));

        let mut bad = all.clone();
        bad[1_234_567] ^= 0x80;
        let mut check = StreamCheck::new(o, 1000);
        for c in bad.chunks(65_536) {
            check.update(c);
        }
        let err = check.finish().err().unwrap_or_else(|| panic!("accepted"));
        assert!(err.contains("body offset 1234567"), "{err}");
        assert!(
            err.contains(&hex::encode(Sha256::digest(&all))),
            "the object's digest is named: {err}"
        );
        assert!(
            err.contains(&hex::encode(Sha256::digest(&bad))),
            "the body's digest is named: {err}"
        );

        // A body longer than the object is wrong where the object ends.
        let o = object();
        let mut tail = bytes(&o, o.size - 10..o.size);
        tail.extend_from_slice(&[0u8; 10]);
        let mut long = StreamCheck::new(o, object().size - 10);
        long.update(&tail);
        let err = long.finish().err().unwrap_or_else(|| panic!("accepted"));
        assert!(err.contains("body offset 10"), "{err}");
    }
}
