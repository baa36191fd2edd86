//! The gateway benches' client against a real server: the origin stub, in
//! this process, with credentials on both protocols, so its signatures are
//! checked by the same server-side code the gateway uses. Every response
//! is verified; a wrong key is a failure quoted verbatim; a delay line in
//! front of the server slows the answers down without breaking them; the
//! slow consumer reads a prefix at its pace.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use talon_core::Backend;

use talon_bench::delay_line::DelayLine;
use talon_bench::deployment::{CLIENT_ACCESS_KEY, CLIENT_SECRET_KEY, client_auth};
use talon_bench::http_load::{Auth, Length, LoadSpec, ObjectTarget, Pick, paced_read, run_load};
use talon_bench::verify::ExpectedRanges;
use talon_origin_stub::generated::GeneratedObject;
use talon_origin_stub::{EMULATOR_AZURE_KEY, RunningStub, StubConfig};
use talon_protocols::azure::shared_key::AccountKey;
use talon_protocols::s3::sigv4::S3Credentials;

fn object() -> GeneratedObject {
    GeneratedObject::new("bench", "client.bin", (4 << 20) + 4096, 7)
}

async fn stub() -> RunningStub {
    let mut s3 = BTreeMap::new();
    s3.insert(CLIENT_ACCESS_KEY.to_owned(), CLIENT_SECRET_KEY.to_owned());
    talon_origin_stub::start(StubConfig {
        generated: vec![object()],
        s3_credentials: s3,
        azure_key: AccountKey::from_base64(EMULATOR_AZURE_KEY).ok(),
        admin_listen: None,
        ..StubConfig::default()
    })
    .await
    .unwrap_or_else(|e| panic!("stub: {e}"))
}

fn spec(target: ObjectTarget, expected: &Arc<ExpectedRanges>, pick: Pick, n: u64) -> LoadSpec {
    LoadSpec {
        target: Arc::new(target),
        expected: expected.clone(),
        concurrency: 4,
        pick,
        length: Length::Requests(n),
        watch: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_s3_and_azure_reads_are_accepted_and_verified() {
    let stub = stub().await;
    let o = object();
    let expected = Arc::new(ExpectedRanges::new(o.clone(), 1 << 20));
    let s3 = ObjectTarget::s3(
        &stub.s3_url().unwrap_or_default(),
        &o.bucket,
        &o.key,
        client_auth(Backend::S3).unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let azure = ObjectTarget::azure(
        &stub.azure_url().unwrap_or_default(),
        &o.bucket,
        &o.key,
        client_auth(Backend::Azure).unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for target in [s3, azure] {
        let what = target.url();
        let out = run_load(spec(target, &expected, Pick::EachOnce, 5)).await;
        assert_eq!(out.first_error, None, "{what}");
        assert_eq!(out.requests, 5, "{what}");
        // Four full ranges and the 4 KiB tail.
        assert_eq!(out.bytes, (4 << 20) + 4096, "{what}");
        assert_eq!(out.latencies.len(), 5);
    }
    stub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_stops_the_run_and_is_quoted() {
    let stub = stub().await;
    let o = object();
    let expected = Arc::new(ExpectedRanges::new(o.clone(), 1 << 20));
    let wrong = ObjectTarget::s3(
        &stub.s3_url().unwrap_or_default(),
        &o.bucket,
        &o.key,
        Auth::SigV4 {
            credentials: S3Credentials {
                access_key: CLIENT_ACCESS_KEY.into(),
                secret_key: "not-the-secret".into(),
                session_token: None,
            },
            region: "us-east-1".into(),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let out = run_load(spec(wrong, &expected, Pick::Random { seed: 3 }, 100)).await;
    assert!(out.errors >= 1);
    assert!(out.requests < 100, "the run stopped at the failure");
    let e = out.first_error.unwrap_or_default();
    assert!(e.contains("status 403 where 206"), "{e}");
    assert!(
        e.contains("SignatureDoesNotMatch"),
        "the body is quoted: {e}"
    );
    stub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_line_in_front_slows_answers_but_keeps_them_whole() {
    let stub = stub().await;
    let o = object();
    let expected = Arc::new(ExpectedRanges::new(o.clone(), 1 << 20));
    let line = DelayLine::bind(([127, 0, 0, 1], 0).into())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    line.set_upstream(stub.s3_addr.unwrap_or_else(|| panic!("no S3 listener")));
    line.set_delay(Duration::from_millis(25));
    let target = ObjectTarget::s3(
        &format!("http://{}", line.local_addr()),
        &o.bucket,
        &o.key,
        client_auth(Backend::S3).unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let out = run_load(spec(target, &expected, Pick::Random { seed: 1 }, 12)).await;
    assert_eq!(out.first_error, None);
    assert_eq!(out.requests, 12);
    assert!(
        out.latencies
            .iter()
            .all(|l| *l >= Duration::from_millis(25)),
        "every answer waited in the line: {:?}",
        out.latencies
    );
    stub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slow_consumer_reads_whole_objects_and_prefixes() {
    let stub = stub().await;
    let o = object();
    let target = ObjectTarget::s3(
        &stub.s3_url().unwrap_or_default(),
        &o.bucket,
        &o.key,
        client_auth(Backend::S3).unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // Fast enough to finish: the whole object, checked.
    let whole = paced_read(&target, &o, 1 << 30, Duration::from_secs(30), |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(whole.complete);
    assert_eq!(whole.verdict.bytes, o.size);
    assert_eq!(whole.verdict.sha256, o.sha256_hex());
    // Too slow to finish: a checked prefix, about rate × time long.
    let mut seen = 0;
    let part = paced_read(&target, &o, 4 << 20, Duration::from_millis(300), |b| {
        seen = b
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!part.complete);
    assert_eq!(part.verdict.bytes, seen);
    assert!(part.verdict.bytes < o.size, "{}", part.verdict.bytes);
    stub.shutdown().await;
}
