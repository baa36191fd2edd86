//! Property test of range reads: for random objects (generated, and files written
//! through the stub, of sizes including 0 and 1) and random `bytes=a-b`, `bytes=a-`,
//! `bytes=-n` headers — satisfiable, clamped, inverted, past the end, overflowing — the
//! stub's status, `Content-Range`, `Content-Length` and body are exactly what
//! `RangeSpec::parse` + `RangeSpec::resolve` and `GeneratedObject::fill` predict, on the
//! S3 front (`Range`) and the Azure front (`x-ms-range`, and `Range`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use talon_origin_stub::StubConfig;
use talon_origin_stub::generated::GeneratedObject;
use talon_protocols::range::RangeSpec;

const BUCKET: &str = "ranges";

/// What a client should see.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    status: u16,
    content_range: Option<String>,
    /// The body for 200/206 answers; the error code otherwise.
    body: Result<Vec<u8>, String>,
}

fn bytes_of(g: &GeneratedObject, start: u64, end: u64) -> Vec<u8> {
    let mut buf = vec![0u8; usize::try_from(end - start).unwrap()];
    g.fill(start, &mut buf);
    buf
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Front {
    /// S3 with `Range`.
    S3,
    /// Azure with `x-ms-range`.
    AzureMsRange,
    /// Azure with `Range`.
    AzureRange,
}

/// The prediction, from the library's own range rules: a header S3 cannot parse is
/// ignored; Azure ignores one in `Range` but refuses it in `x-ms-range`, and defines no
/// suffix ranges.
fn predict(front: Front, header: &str, content: &GeneratedObject) -> Seen {
    let size = content.size;
    let whole = Seen {
        status: 200,
        content_range: None,
        body: Ok(bytes_of(content, 0, size)),
    };
    let spec = RangeSpec::parse(header);
    let spec = match front {
        Front::S3 => spec,
        Front::AzureRange => spec.filter(|s| !s.is_suffix()),
        Front::AzureMsRange => match spec.filter(|s| !s.is_suffix()) {
            Some(s) => Some(s),
            None => {
                return Seen {
                    status: 400,
                    content_range: None,
                    body: Err("InvalidHeaderValue".into()),
                };
            }
        },
    };
    let Some(spec) = spec else { return whole };
    match spec.resolve(size) {
        Ok(r) => Seen {
            status: 206,
            content_range: Some(r.content_range(size)),
            body: Ok(bytes_of(content, r.start, r.end)),
        },
        Err(u) => Seen {
            status: 416,
            content_range: Some(u.content_range()),
            body: Err("InvalidRange".into()),
        },
    }
}

fn error_code(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.split_once("<Code>")
        .and_then(|(_, rest)| rest.split_once("</Code>"))
        .map(|(code, _)| code.to_owned())
        .unwrap_or_else(|| format!("no code in {text}"))
}

/// A range header over an object of `size` bytes: offsets cluster around the object's
/// edges, with some far past it and some that overflow `u64`.
fn header_for(size: u64) -> impl Strategy<Value = String> {
    let offset = prop_oneof![
        4 => 0..=size + 2,
        1 => Just(size.saturating_sub(1)),
        1 => size..size + 1000,
        1 => Just(u64::MAX),
    ];
    let offset_text = prop_oneof![
        8 => offset.prop_map(|n| n.to_string()),
        1 => Just("18446744073709551616".to_owned()),
    ];
    prop_oneof![
        3 => (offset_text.clone(), offset_text.clone()).prop_map(|(a, b)| format!("bytes={a}-{b}")),
        2 => offset_text.clone().prop_map(|a| format!("bytes={a}-")),
        2 => offset_text.prop_map(|n| format!("bytes=-{n}")),
    ]
}

fn case() -> impl Strategy<Value = (u64, u64, Vec<String>)> {
    let size = prop_oneof![
        2 => Just(0u64),
        2 => Just(1u64),
        4 => 2u64..5000,
        1 => (256u64 * 1024 - 3)..(256 * 1024 + 3),
    ];
    (size, any::<u64>()).prop_flat_map(|(size, seed)| {
        (
            Just(size),
            Just(seed),
            proptest::collection::vec(header_for(size), 3),
        )
    })
}

async fn fetch(http: &reqwest::Client, url: &str, name: &str, value: &str) -> Seen {
    let resp = http.get(url).header(name, value).send().await.unwrap();
    let status = resp.status().as_u16();
    let content_range = resp
        .headers()
        .get("content-range")
        .map(|v| v.to_str().unwrap().to_owned());
    let content_length: Option<usize> = resp
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let body = resp.bytes().await.unwrap().to_vec();
    assert_eq!(content_length, Some(body.len()), "Content-Length is exact");
    let body = if status < 300 {
        Ok(body)
    } else {
        // The 416 keeps `Content-Range: bytes */size`; other errors carry none.
        Err(error_code(&body))
    };
    Seen {
        status,
        content_range,
        body,
    }
}

#[test]
fn range_reads_match_the_prediction() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let http = reqwest::Client::new();
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&case(), |(size, seed, headers)| {
            rt.block_on(async {
                let generated = GeneratedObject::new(BUCKET, "generated.bin", size, seed);
                // The file object's bytes come from the same definition, under its own key.
                let file = GeneratedObject::new(BUCKET, "file.bin", size, seed ^ 1);
                let stub = talon_origin_stub::start(StubConfig {
                    generated: vec![generated.clone()],
                    ..StubConfig::default()
                })
                .await
                .unwrap();
                let s3 = stub.s3_url().unwrap();
                let azure = stub.azure_url().unwrap();
                let put = http
                    .put(format!("{s3}/{BUCKET}/file.bin"))
                    .header("content-length", size)
                    .body(bytes_of(&file, 0, size))
                    .send()
                    .await
                    .unwrap();
                prop_assert_eq!(put.status().as_u16(), 200);
                for header in &headers {
                    for (content, key) in [(&generated, "generated.bin"), (&file, "file.bin")] {
                        for front in [Front::S3, Front::AzureMsRange, Front::AzureRange] {
                            let (url, name) = match front {
                                Front::S3 => (format!("{s3}/{BUCKET}/{key}"), "range"),
                                Front::AzureMsRange => {
                                    (format!("{azure}/{BUCKET}/{key}"), "x-ms-range")
                                }
                                Front::AzureRange => (format!("{azure}/{BUCKET}/{key}"), "range"),
                            };
                            let seen = fetch(&http, &url, name, header).await;
                            let expected = predict(front, header, content);
                            prop_assert!(
                                seen == expected,
                                "{:?} {} '{}: {}' on {} bytes: status {} {:?}, expected {} {:?} (bodies equal: {})",
                                front,
                                key,
                                name,
                                header,
                                size,
                                seen.status,
                                seen.content_range,
                                expected.status,
                                expected.content_range,
                                seen.body == expected.body
                            );
                        }
                    }
                }
                stub.shutdown().await;
                Ok::<(), TestCaseError>(())
            })
        })
        .unwrap();
}
