//! `protocol_benches`: the per-request protocol work a gateway does before any byte
//! moves — classifying an S3 or Azure request, parsing its range and conditions, and
//! verifying its signature (SigV4 header, SigV4 presigned, Azure Shared Key).
//!
//! CPU-bound and deterministic: regression floors for the request path, not throughput.

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderMap, Method};
use talon_core::Backend;
use talon_protocols::answer::ProtocolFront as _;
use talon_protocols::azure::request::{AzureAddressing, AzureRequest};
use talon_protocols::azure::shared_key::{self, AccountKey, SharedKeyParts};
use talon_protocols::conditional::Conditions;
use talon_protocols::range::RangeSpec;
use talon_protocols::s3::request::{S3Addressing, S3Request};
use talon_protocols::s3::sigv4::{self, RequestParts, S3Credentials, SignedBody};

const AK: &str = "AKIABENCHMARK";
const SK: &str = "bench/secret/key";
const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

fn headers(pairs: &[(String, String)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
            v.parse().expect("value"),
        );
    }
    h
}

fn parsing(c: &mut Criterion) {
    let h = headers(&[
        ("host".into(), "127.0.0.1:9000".into()),
        ("range".into(), "bytes=1048576-2097151".into()),
        ("if-none-match".into(), "\"abc\"".into()),
    ]);
    let path = "/training-data/shards/part-00042.parquet";
    c.bench_function("s3/classify_get_object", |b| {
        b.iter(|| {
            S3Request::classify(
                &Method::GET,
                &S3Addressing::PathStyle,
                black_box(&h),
                black_box(path),
                "x-id=GetObject",
            )
        })
    });
    c.bench_function("s3/classify_list_v2", |b| {
        b.iter(|| {
            S3Request::classify(
                &Method::GET,
                &S3Addressing::PathStyle,
                black_box(&h),
                "/training-data",
                black_box("list-type=2&prefix=shards%2F&delimiter=%2F&encoding-type=url"),
            )
        })
    });
    let az = headers(&[
        ("host".into(), "127.0.0.1:10000".into()),
        ("x-ms-version".into(), "2025-01-05".into()),
    ]);
    c.bench_function("azure/classify_get_blob", |b| {
        b.iter(|| {
            AzureRequest::classify(
                &Method::GET,
                &AzureAddressing::PathStyle,
                black_box(&az),
                "/devstoreaccount1/data/shard.bin",
                "",
            )
        })
    });
    c.bench_function("range/parse_and_resolve", |b| {
        b.iter(|| {
            RangeSpec::parse(black_box("bytes=1048576-2097151"))
                .map(|r| r.resolve(black_box(1 << 30)))
        })
    });
    c.bench_function("conditions/parse_and_check", |b| {
        b.iter(|| {
            Conditions::from_headers(black_box(&h)).check_read("\"abd\"", SystemTime::UNIX_EPOCH)
        })
    });
}

fn signatures(c: &mut Criterion) {
    let now = SystemTime::now();
    let creds = S3Credentials {
        access_key: AK.into(),
        secret_key: SK.into(),
        session_token: None,
    };
    let url = "http://127.0.0.1:9000/training-data/shards/part-00042.parquet";
    let base = [("host", "127.0.0.1:9000"), ("range", "bytes=0-1048575")];
    let signed = sigv4::sign_request(
        "GET",
        url,
        &base,
        SignedBody::Bytes(&[]),
        &creds,
        "us-east-1",
        now,
    )
    .expect("sign");
    let mut all: Vec<(String, String)> = base
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    all.extend(signed);
    let h = headers(&all);
    let parts = RequestParts {
        method: "GET",
        raw_path: "/training-data/shards/part-00042.parquet",
        raw_query: "",
        headers: &h,
    };
    c.bench_function("sigv4/verify_header", |b| {
        b.iter(|| {
            let auth = sigv4::parse_authorization(black_box(&h), "")
                .expect("parse")
                .expect("present");
            sigv4::verify(&parts, &auth, SK, now).expect("valid")
        })
    });
    let presigned = sigv4::presign_url(
        "GET",
        url,
        &creds,
        "us-east-1",
        Duration::from_secs(3600),
        now,
    )
    .expect("presign");
    let query = presigned
        .split_once('?')
        .map(|(_, q)| q.to_owned())
        .unwrap_or_default();
    let ph = headers(&[("host".into(), "127.0.0.1:9000".into())]);
    let pparts = RequestParts {
        method: "GET",
        raw_path: "/training-data/shards/part-00042.parquet",
        raw_query: &query,
        headers: &ph,
    };
    // The wrong-front check every request passes before it is classified: a request
    // signed for this front (the hit path's case) must cost next to nothing.
    c.bench_function("front/signed_for_this_front_header", |b| {
        b.iter(|| {
            Backend::S3
                .check_signed_for_this_front(black_box(&h), black_box(""))
                .expect("this front")
        })
    });
    c.bench_function("front/signed_for_this_front_presigned", |b| {
        b.iter(|| {
            Backend::S3
                .check_signed_for_this_front(black_box(&ph), black_box(&query))
                .expect("this front")
        })
    });
    c.bench_function("sigv4/verify_presigned", |b| {
        b.iter(|| {
            let auth = sigv4::parse_authorization(&ph, black_box(&query))
                .expect("parse")
                .expect("present");
            sigv4::verify(&pparts, &auth, SK, now).expect("valid")
        })
    });
    let key = AccountKey::from_base64(KEY).expect("key");
    let ah = headers(&[
        ("x-ms-version".into(), "2025-01-05".into()),
        ("x-ms-date".into(), "Mon, 30 Nov 2026 12:00:00 GMT".into()),
        ("x-ms-range".into(), "bytes=0-1048575".into()),
    ]);
    let aparts = SharedKeyParts {
        method: "GET",
        raw_path: "/devstoreaccount1/data/shard.bin",
        raw_query: "",
        headers: &ah,
    };
    let authorization = shared_key::authorization(&aparts, "devstoreaccount1", &key);
    let signature = authorization
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    let signed_at =
        talon_protocols::dates::parse_http_date("Mon, 30 Nov 2026 12:00:00 GMT").expect("date");
    c.bench_function("shared_key/verify", |b| {
        b.iter(|| {
            shared_key::verify(
                &aparts,
                "devstoreaccount1",
                &key,
                "devstoreaccount1",
                black_box(&signature),
                signed_at,
            )
            .expect("valid")
        })
    });
}

criterion_group!(benches, parsing, signatures);
criterion_main!(benches);
