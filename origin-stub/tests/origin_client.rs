//! The origin client of `talon-protocols` against a real, in-process origin stub, once
//! per protocol: the same conformance suite runs with an S3 client (SigV4) and an Azure
//! client (Shared Key), so both fronts and both halves of the client must agree on what
//! a user sees — sizes, quoted ETags, bytes (also past 4 GiB), pinned reads, listings,
//! error kinds, injected faults, and the stub's request counters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use base64::Engine;
use bytes::Bytes;
use futures_util::StreamExt;
use talon_core::Backend;
use talon_origin_stub::faults::{FaultConfig, FaultKind};
use talon_origin_stub::generated::GeneratedObject;
use talon_origin_stub::{EMULATOR_AZURE_KEY, RunningStub, StubConfig};
use talon_protocols::azure::sas::{SasGrant, generate_service_sas};
use talon_protocols::azure::shared_key::AccountKey;
use talon_protocols::origin::{
    AZURE_API_VERSION, ByteStream, GetResponse, ObjectInfo, OriginClient, OriginConfig,
};
use talon_protocols::range::ByteRange;
use talon_protocols::s3::sigv4::S3Credentials;
use talon_protocols::{Error, ErrorKind};

const ACCESS_KEY: &str = "AKIATALONSTUBTEST";
const SECRET_KEY: &str = "talon/secret+key/for-tests";
const ACCOUNT: &str = "devstoreaccount1";
const BUCKET: &str = "conformance";
const FIVE_GIB: u64 = 5 << 30;
const FOUR_GIB: u64 = 1 << 32;

/// A 5 GiB generated object, so reads past 4 GiB cost nothing.
fn big() -> GeneratedObject {
    GeneratedObject::new(BUCKET, "big/five-gib.bin", FIVE_GIB, 11)
}

/// A generated object larger than one response chunk of the stub (256 KiB).
fn medium() -> GeneratedObject {
    GeneratedObject::new(BUCKET, "gen/medium.bin", 700_001, 5)
}

fn generated_bytes(g: &GeneratedObject, start: u64, end: u64) -> Vec<u8> {
    let mut buf = vec![0u8; usize::try_from(end - start).unwrap()];
    g.fill(start, &mut buf);
    buf
}

/// Test bytes that are not all alike: a counter mixed with a tag.
fn pattern(len: usize, tag: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ tag ^ ((i >> 8) as u8))
        .collect::<Vec<u8>>()
        .into()
}

async fn start_stub() -> RunningStub {
    let stub = talon_origin_stub::start(StubConfig {
        generated: vec![big(), medium()],
        s3_credentials: BTreeMap::from([(ACCESS_KEY.to_owned(), SECRET_KEY.to_owned())]),
        azure_key: Some(AccountKey::from_base64(EMULATOR_AZURE_KEY).unwrap()),
        ..StubConfig::default()
    })
    .await
    .expect("stub starts");
    // Buckets that only hold generated objects exist; a second, empty one is made on disk.
    std::fs::create_dir_all(stub.data_dir().join("other")).unwrap();
    stub
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    S3,
    Azure,
}

impl Flavor {
    fn protocol(self) -> Backend {
        match self {
            Flavor::S3 => Backend::S3,
            Flavor::Azure => Backend::Azure,
        }
    }

    /// The stub's operation names for GET and HEAD of an object.
    fn get_op(self) -> &'static str {
        match self {
            Flavor::S3 => "GetObject",
            Flavor::Azure => "GetBlob",
        }
    }

    fn head_op(self) -> &'static str {
        match self {
            Flavor::S3 => "HeadObject",
            Flavor::Azure => "GetBlobProperties",
        }
    }
}

fn client(stub: &RunningStub, flavor: Flavor, good_secret: bool) -> OriginClient {
    let config = match flavor {
        Flavor::S3 => OriginConfig::S3 {
            endpoint: stub.s3_url().unwrap(),
            region: "us-east-1".into(),
            credentials: Some(S3Credentials {
                access_key: ACCESS_KEY.into(),
                secret_key: if good_secret {
                    SECRET_KEY.into()
                } else {
                    "not-the-secret".into()
                },
                session_token: None,
            }),
            virtual_hosted: false,
        },
        Flavor::Azure => {
            let key = if good_secret {
                EMULATOR_AZURE_KEY.to_owned()
            } else {
                base64::engine::general_purpose::STANDARD.encode([7u8; 64])
            };
            OriginConfig::Azure {
                endpoint: stub.azure_url().unwrap(),
                account: ACCOUNT.into(),
                key: Some(AccountKey::from_base64(&key).unwrap()),
                sas: None,
            }
        }
    };
    OriginClient::new(config).unwrap()
}

/// Drains a body, returning the bytes or the first error.
async fn drain(mut body: ByteStream) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        out.extend_from_slice(&chunk?);
    }
    Ok(out)
}

/// Drains a body until it ends or fails: the bytes received, and the error if any.
async fn drain_until_error(mut body: ByteStream) -> (Vec<u8>, Option<Error>) {
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(c) => out.extend_from_slice(&c),
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

fn kind_of<T: std::fmt::Debug>(r: Result<T, Error>) -> ErrorKind {
    r.expect_err("the call should fail").kind()
}

fn assert_quoted(etag: &str) {
    assert!(
        etag.len() > 2 && etag.starts_with('"') && etag.ends_with('"'),
        "ETag {etag} is quoted"
    );
}

/// A client plus the number of GETs and HEADs made through it, to compare with the
/// stub's counters at the end.
struct Harness {
    flavor: Flavor,
    client: OriginClient,
    gets: u64,
    heads: u64,
}

impl Harness {
    async fn get(
        &mut self,
        client: Option<&OriginClient>,
        bucket: &str,
        key: &str,
        range: Option<ByteRange>,
        if_match: Option<&str>,
    ) -> Result<GetResponse, Error> {
        self.gets += 1;
        client
            .unwrap_or(&self.client)
            .get(bucket, key, range, if_match)
            .await
    }

    async fn read(
        &mut self,
        key: &str,
        range: Option<ByteRange>,
    ) -> (ObjectInfo, Option<ByteRange>, Vec<u8>) {
        let resp = self.get(None, BUCKET, key, range, None).await.unwrap();
        let bytes = drain(resp.body).await.expect("complete body");
        (resp.info, resp.range, bytes)
    }

    async fn head(&mut self, key: &str) -> Result<ObjectInfo, Error> {
        self.heads += 1;
        self.client.head(BUCKET, key).await
    }

    /// Every page of a listing, following the continuation token.
    async fn list_all(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        max_keys: usize,
    ) -> (Vec<String>, Vec<String>, usize) {
        let (mut objects, mut prefixes, mut pages) = (Vec::new(), Vec::new(), 0);
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .list(BUCKET, prefix, delimiter, token.as_deref(), Some(max_keys))
                .await
                .unwrap();
            pages += 1;
            assert!(
                page.objects.len() + page.common_prefixes.len() <= max_keys,
                "a page holds at most max_keys entries: {page:?}"
            );
            objects.extend(page.objects.into_iter().map(|o| o.key));
            prefixes.extend(page.common_prefixes);
            match page.next_token {
                Some(t) => token = Some(t),
                None => break,
            }
            assert!(pages < 100, "the listing never ends");
        }
        (objects, prefixes, pages)
    }
}

async fn conformance(flavor: Flavor) {
    let stub = start_stub().await;
    let mut h = Harness {
        flavor,
        client: client(&stub, flavor, true),
        gets: 0,
        heads: 0,
    };

    // Put, then head: size, quoted ETag equal to the put's, content type.
    let key = "docs/report one+final ü.txt";
    let body = pattern(300_007, 1);
    let etag = h
        .client
        .put(BUCKET, key, body.clone(), Some("text/plain"))
        .await
        .unwrap();
    assert_quoted(&etag);
    let info = h.head(key).await.unwrap();
    assert_eq!(info.size, body.len() as u64);
    assert_eq!(info.etag, etag);
    assert_eq!(info.content_type.as_deref(), Some("text/plain"));
    assert!(info.last_modified.is_some());

    // Whole and ranged reads, the last byte, a range clamped at the end.
    let (whole_info, whole_range, whole) = h.read(key, None).await;
    assert_eq!(whole_range, None);
    assert_eq!(whole_info.etag, etag);
    assert_eq!(whole_info.size, body.len() as u64);
    assert_eq!(whole, body);
    let size = body.len() as u64;
    for (start, end) in [(0, 1), (1000, 262_145), (size - 1, size), (size - 10, size)] {
        let r = ByteRange { start, end };
        let (info, served, bytes) = h.read(key, Some(r)).await;
        assert_eq!(served, Some(r));
        assert_eq!(info.size, size, "size is the whole object's");
        assert_eq!(info.etag, etag);
        assert_eq!(bytes, body[start as usize..end as usize]);
    }

    // A 5 GiB generated object: metadata, ranges below, across and above 4 GiB, its
    // last byte, a range running past the end (served clamped), one starting past it.
    let g = big();
    let info = h.head(&g.key).await.unwrap();
    assert_eq!(info.size, FIVE_GIB);
    assert_eq!(info.etag, g.etag());
    assert_eq!(info.last_modified, Some(g.last_modified()));
    for (start, end) in [
        (0, 4096),
        (FOUR_GIB - 4099, FOUR_GIB + 8197),
        (FOUR_GIB, FOUR_GIB + 1),
        (FIVE_GIB - 1, FIVE_GIB),
    ] {
        let r = ByteRange { start, end };
        let (info, served, bytes) = h.read(&g.key, Some(r)).await;
        assert_eq!(served, Some(r));
        assert_eq!(
            (info.size, info.etag.as_str()),
            (FIVE_GIB, g.etag().as_str())
        );
        assert_eq!(bytes, generated_bytes(&g, start, end), "{start}..{end}");
    }
    let (_, served, bytes) = h
        .read(
            &g.key,
            Some(ByteRange {
                start: FIVE_GIB - 10,
                end: FIVE_GIB + 100,
            }),
        )
        .await;
    assert_eq!(
        served,
        Some(ByteRange {
            start: FIVE_GIB - 10,
            end: FIVE_GIB
        })
    );
    assert_eq!(bytes, generated_bytes(&g, FIVE_GIB - 10, FIVE_GIB));
    let past_end = ByteRange {
        start: FIVE_GIB,
        end: FIVE_GIB + 1,
    };
    assert_eq!(
        kind_of(h.get(None, BUCKET, &g.key, Some(past_end), None).await),
        ErrorKind::InvalidRange
    );
    // A whole generated object, larger than one response chunk, by SHA-256.
    let m = medium();
    let (info, _, bytes) = h.read(&m.key, None).await;
    assert_eq!(info.size, m.size);
    assert_eq!(
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)),
        m.sha256_hex()
    );

    // An empty object (a file put in the data folder): size 0, empty body, and any
    // range is unsatisfiable.
    std::fs::write(stub.data_dir().join(BUCKET).join("empty.bin"), b"").unwrap();
    let info = h.head("empty.bin").await.unwrap();
    assert_eq!(info.size, 0);
    assert_quoted(&info.etag);
    let (info, served, bytes) = h.read("empty.bin", None).await;
    assert_eq!((info.size, served, bytes.len()), (0, None, 0));
    assert_eq!(
        kind_of(
            h.get(
                None,
                BUCKET,
                "empty.bin",
                Some(ByteRange { start: 0, end: 1 }),
                None
            )
            .await
        ),
        ErrorKind::InvalidRange
    );

    // Pinned reads: the current ETag works; after an overwrite, the old one fails.
    let pinned = h.get(None, BUCKET, key, None, Some(&etag)).await.unwrap();
    assert_eq!(drain(pinned.body).await.unwrap(), body);
    let unquoted = etag.trim_matches('"').to_owned();
    let pinned = h
        .get(
            None,
            BUCKET,
            key,
            Some(ByteRange { start: 5, end: 9 }),
            Some(&unquoted),
        )
        .await
        .unwrap();
    assert_eq!(drain(pinned.body).await.unwrap(), body[5..9]);
    let new_body = pattern(1234, 2);
    let new_etag = h
        .client
        .put(BUCKET, key, new_body.clone(), None)
        .await
        .unwrap();
    assert_ne!(new_etag, etag, "new content, new ETag");
    let stale = h.get(None, BUCKET, key, None, Some(&etag)).await;
    let err = stale.expect_err("stale ETag");
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
    assert!(!err.kind().is_retryable());
    let stale_range = h
        .get(
            None,
            BUCKET,
            key,
            Some(ByteRange { start: 0, end: 1 }),
            Some(&etag),
        )
        .await;
    assert_eq!(kind_of(stale_range), ErrorKind::PreconditionFailed);
    let fresh = h
        .get(None, BUCKET, key, None, Some(&new_etag))
        .await
        .unwrap();
    assert_eq!(fresh.info.etag, new_etag);
    assert_eq!(drain(fresh.body).await.unwrap(), new_body);

    // Listings: prefix, delimiter, paging, keys with spaces, '+' and non-ASCII.
    let keys = [
        "list/a b.txt",
        "list/a+b.txt",
        "list/sub/one.txt",
        "list/sub/two three.txt",
        "list/sub2/x y+z.txt",
        "list/zz.txt",
        "list/ümlaut ß.txt",
        "list/日本/語.txt",
        "listing-not-under-prefix.txt",
    ];
    for (i, k) in keys.iter().enumerate() {
        let data = pattern(i * 3 + 1, i as u8);
        let etag = h.client.put(BUCKET, k, data.clone(), None).await.unwrap();
        let (info, _, bytes) = h.read(k, None).await;
        assert_eq!((info.etag, bytes), (etag, data.to_vec()), "{k}");
    }
    let mut under: Vec<String> = keys
        .iter()
        .filter(|k| k.starts_with("list/"))
        .map(|k| (*k).to_owned())
        .collect();
    under.sort();
    let (objects, prefixes, pages) = h.list_all("list/", None, 3).await;
    assert_eq!(objects, under, "every key once, in byte order");
    assert!(prefixes.is_empty());
    assert!(pages >= 3, "paged: {pages} pages");
    let (objects, prefixes, pages) = h.list_all("list/", Some("/"), 2).await;
    assert_eq!(
        objects,
        [
            "list/a b.txt",
            "list/a+b.txt",
            "list/zz.txt",
            "list/ümlaut ß.txt"
        ]
    );
    assert_eq!(
        prefixes.iter().collect::<BTreeSet<_>>().len(),
        prefixes.len(),
        "no prefix repeated across pages: {prefixes:?}"
    );
    assert_eq!(
        prefixes.iter().map(String::as_str).collect::<BTreeSet<_>>(),
        BTreeSet::from(["list/sub/", "list/sub2/", "list/日本/"])
    );
    assert!(pages >= 3, "paged: {pages} pages");
    let one_page = h
        .client
        .list(BUCKET, "list/sub/", None, None, None)
        .await
        .unwrap();
    assert_eq!(one_page.next_token, None);
    let listed: Vec<(&str, u64)> = one_page
        .objects
        .iter()
        .map(|o| (o.key.as_str(), o.size))
        .collect();
    assert_eq!(
        listed,
        [("list/sub/one.txt", 7), ("list/sub/two three.txt", 10)]
    );
    for o in &one_page.objects {
        assert_quoted(&o.etag);
        assert_eq!(o.etag, h.head(&o.key).await.unwrap().etag);
    }
    let empty = h
        .client
        .list(BUCKET, "nothing-here/", Some("/"), None, Some(5))
        .await
        .unwrap();
    assert_eq!(
        (
            empty.objects.len(),
            empty.common_prefixes.len(),
            empty.next_token
        ),
        (0, 0, None)
    );
    let other = h.client.list("other", "", None, None, None).await.unwrap();
    assert!(other.objects.is_empty());

    // Delete, then the object is gone for head and get.
    h.client.delete(BUCKET, key).await.unwrap();
    assert_eq!(kind_of(h.head(key).await), ErrorKind::NoSuchKey);
    assert_eq!(
        kind_of(h.get(None, BUCKET, key, None, None).await),
        ErrorKind::NoSuchKey
    );
    let second_delete = h.client.delete(BUCKET, key).await;
    match flavor {
        Flavor::S3 => second_delete.expect("S3 deletes of missing keys succeed"),
        Flavor::Azure => assert_eq!(kind_of(second_delete), ErrorKind::NoSuchKey),
    }
    let (objects, _, _) = h.list_all("docs/", None, 10).await;
    assert!(
        objects.is_empty(),
        "deleted keys are not listed: {objects:?}"
    );

    // Wrong credentials and unknown buckets.
    let wrong = client(&stub, flavor, false);
    assert_eq!(
        kind_of(h.get(Some(&wrong), BUCKET, &m.key, None, None).await),
        ErrorKind::SignatureDoesNotMatch
    );
    assert_eq!(
        kind_of(wrong.list(BUCKET, "", None, None, None).await),
        ErrorKind::SignatureDoesNotMatch
    );
    assert_eq!(
        kind_of(wrong.put(BUCKET, "denied.txt", pattern(3, 0), None).await),
        ErrorKind::SignatureDoesNotMatch
    );
    assert_eq!(kind_of(h.head("denied.txt").await), ErrorKind::NoSuchKey);
    assert_eq!(
        kind_of(h.get(None, "no-such-bucket", "k", None, None).await),
        ErrorKind::NoSuchBucket
    );
    assert_eq!(
        kind_of(h.client.list("no-such-bucket", "", None, None, None).await),
        ErrorKind::NoSuchBucket
    );
    assert_eq!(
        kind_of(
            h.client
                .put("no-such-bucket", "k", pattern(3, 0), None)
                .await
        ),
        ErrorKind::NoSuchBucket
    );

    // Faults: throttling, internal errors, resets, truncated bodies; then recovery.
    let faults = |kind: FaultKind| FaultConfig {
        error_rate: 1.0,
        error_kinds: vec![kind],
        ..FaultConfig::default()
    };
    stub.faults().set(faults(FaultKind::Slowdown)).unwrap();
    let err = h
        .get(None, BUCKET, &m.key, None, None)
        .await
        .expect_err("slowdown");
    assert_eq!(err.kind(), ErrorKind::SlowDown);
    assert!(err.kind().is_retryable());
    assert_eq!(kind_of(h.head(&m.key).await), ErrorKind::SlowDown);
    stub.faults().set(faults(FaultKind::Internal)).unwrap();
    let err = h
        .get(None, BUCKET, &m.key, None, None)
        .await
        .expect_err("internal");
    assert_eq!(err.kind(), ErrorKind::InternalError);
    assert!(err.kind().is_retryable());
    stub.faults().set(faults(FaultKind::Reset)).unwrap();
    let err = h
        .get(None, BUCKET, &m.key, None, None)
        .await
        .expect_err("reset");
    assert_eq!(err.kind(), ErrorKind::ServiceUnavailable);
    assert!(err.kind().is_retryable());
    // Truncation on bodies large enough that the stub has flushed the headers (see
    // `truncate_fault_on_small_bodies_sends_headers_first` for small ones).
    stub.faults().set(faults(FaultKind::Truncate)).unwrap();
    for r in [
        ByteRange {
            start: 0,
            end: 4 << 20,
        },
        ByteRange {
            start: FOUR_GIB - (3 << 20),
            end: FOUR_GIB + (1 << 20),
        },
    ] {
        let resp = h
            .get(None, BUCKET, &g.key, Some(r), None)
            .await
            .expect("headers arrive before the cut");
        assert_eq!(resp.range, Some(r));
        let (received, failure) = drain_until_error(resp.body).await;
        let failure = failure.expect("a truncated body never looks complete");
        assert_eq!(failure.kind(), ErrorKind::IncompleteBody, "{failure}");
        assert!(
            (received.len() as u64) < r.len(),
            "short: {}",
            received.len()
        );
        assert_eq!(
            received,
            generated_bytes(&g, r.start, r.start + received.len() as u64),
            "what arrived before the cut is the object's bytes"
        );
    }
    stub.faults().set(FaultConfig::default()).unwrap();
    let (_, _, bytes) = h.read(&m.key, Some(ByteRange { start: 0, end: 10 })).await;
    assert_eq!(bytes, generated_bytes(&m, 0, 10));

    // The stub saw exactly the GETs and HEADs made, no more (no hidden retries).
    let metrics = stub.metrics();
    assert_eq!(
        metrics.requests_of(flavor.protocol(), flavor.get_op()),
        h.gets,
        "{:?} GETs",
        h.flavor
    );
    assert_eq!(
        metrics.requests_of(flavor.protocol(), flavor.head_op()),
        h.heads,
        "{:?} HEADs",
        h.flavor
    );
    let other = match flavor {
        Flavor::S3 => (Backend::Azure, Flavor::Azure.get_op()),
        Flavor::Azure => (Backend::S3, Flavor::S3.get_op()),
    };
    assert_eq!(metrics.requests_of(other.0, other.1), 0);
    stub.shutdown().await;
}

#[tokio::test]
async fn s3_client_conformance() {
    conformance(Flavor::S3).await;
}

#[tokio::test]
async fn azure_client_conformance() {
    conformance(Flavor::Azure).await;
}

/// Objects written through one protocol are read, with the same ETag, through the other.
#[tokio::test]
async fn both_clients_see_the_same_objects() {
    let stub = start_stub().await;
    let s3 = client(&stub, Flavor::S3, true);
    let azure = client(&stub, Flavor::Azure, true);
    let body = pattern(70_000, 9);
    let etag = s3
        .put(BUCKET, "shared/x y.bin", body.clone(), None)
        .await
        .unwrap();
    let via_azure = azure
        .get(BUCKET, "shared/x y.bin", None, Some(&etag))
        .await
        .unwrap();
    assert_eq!(via_azure.info.etag, etag);
    assert_eq!(drain(via_azure.body).await.unwrap(), body);
    let etag2 = azure
        .put(BUCKET, "shared/x y.bin", pattern(5, 1), None)
        .await
        .unwrap();
    assert_eq!(s3.head(BUCKET, "shared/x y.bin").await.unwrap().etag, etag2);
    assert_eq!(
        kind_of(s3.get(BUCKET, "shared/x y.bin", None, Some(&etag)).await),
        ErrorKind::PreconditionFailed
    );
    stub.shutdown().await;
}

fn sas_client(stub: &RunningStub, sas: String) -> OriginClient {
    OriginClient::new(OriginConfig::Azure {
        endpoint: stub.azure_url().unwrap(),
        account: ACCOUNT.into(),
        key: None,
        sas: Some(sas),
    })
    .unwrap()
}

#[tokio::test]
async fn azure_sas_client_reads_what_the_token_grants() {
    let stub = start_stub().await;
    let owner = client(&stub, Flavor::Azure, true);
    let body = pattern(40_000, 3);
    let etag = owner
        .put(
            BUCKET,
            "sas/blob one.bin",
            body.clone(),
            Some("application/x-test"),
        )
        .await
        .unwrap();
    owner
        .put(BUCKET, "sas/other.bin", pattern(10, 4), None)
        .await
        .unwrap();
    let key = AccountKey::from_base64(EMULATOR_AZURE_KEY).unwrap();
    let now = SystemTime::now();
    let grant = |blob: Option<&'static str>, permissions: &'static str, expiry: SystemTime| {
        let grant = SasGrant {
            account: ACCOUNT,
            container: BUCKET,
            blob,
            permissions,
            start: Some(now - Duration::from_secs(7200)),
            expiry,
            version: AZURE_API_VERSION,
        };
        generate_service_sas(&grant, &key)
    };
    let hour = Duration::from_secs(3600);

    // A read+list container SAS: head, whole and ranged get, list.
    let reader = sas_client(&stub, grant(None, "rl", now + hour));
    let info = reader.head(BUCKET, "sas/blob one.bin").await.unwrap();
    assert_eq!(
        (info.size, info.etag.as_str(), info.content_type.as_deref()),
        (40_000, etag.as_str(), Some("application/x-test"))
    );
    let got = reader
        .get(BUCKET, "sas/blob one.bin", None, Some(&etag))
        .await
        .unwrap();
    assert_eq!(drain(got.body).await.unwrap(), body);
    let r = ByteRange {
        start: 39_990,
        end: 40_000,
    };
    let got = reader
        .get(BUCKET, "sas/blob one.bin", Some(r), None)
        .await
        .unwrap();
    assert_eq!(got.range, Some(r));
    assert_eq!(drain(got.body).await.unwrap(), body[39_990..]);
    let g = big();
    let r = ByteRange {
        start: FOUR_GIB - 3,
        end: FOUR_GIB + 3,
    };
    let got = reader.get(BUCKET, &g.key, Some(r), None).await.unwrap();
    assert_eq!(
        drain(got.body).await.unwrap(),
        generated_bytes(&g, r.start, r.end)
    );
    let listed = reader.list(BUCKET, "sas/", None, None, None).await.unwrap();
    let names: Vec<&str> = listed.objects.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(names, ["sas/blob one.bin", "sas/other.bin"]);

    // It grants neither writes nor deletes, and nothing changes.
    assert_eq!(
        kind_of(
            reader
                .put(BUCKET, "sas/blob one.bin", pattern(1, 0), None)
                .await
        ),
        ErrorKind::PermissionMismatch
    );
    assert_eq!(
        kind_of(reader.delete(BUCKET, "sas/blob one.bin").await),
        ErrorKind::PermissionMismatch
    );
    assert_eq!(
        owner.head(BUCKET, "sas/blob one.bin").await.unwrap().etag,
        etag
    );

    // A read-only SAS cannot list; a blob SAS reads its blob only.
    let no_list = sas_client(&stub, grant(None, "r", now + hour));
    assert_eq!(
        kind_of(no_list.list(BUCKET, "", None, None, None).await),
        ErrorKind::PermissionMismatch
    );
    let blob_sas = sas_client(&stub, grant(Some("sas/other.bin"), "r", now + hour));
    let got = blob_sas
        .get(BUCKET, "sas/other.bin", None, None)
        .await
        .unwrap();
    assert_eq!(drain(got.body).await.unwrap(), pattern(10, 4));
    let err = kind_of(blob_sas.get(BUCKET, "sas/blob one.bin", None, None).await);
    assert!(
        matches!(
            err,
            ErrorKind::SignatureDoesNotMatch | ErrorKind::PermissionMismatch
        ),
        "{err:?}"
    );

    // Expired, tampered and missing tokens are refused.
    let expired = sas_client(&stub, grant(None, "rl", now - Duration::from_secs(60)));
    let err = kind_of(expired.get(BUCKET, "sas/other.bin", None, None).await);
    assert!(
        matches!(
            err,
            ErrorKind::SignatureDoesNotMatch | ErrorKind::ExpiredRequest
        ),
        "{err:?}"
    );
    let token = grant(None, "rl", now + hour);
    let tampered = token.replace("sp=rl", "sp=rwl");
    assert_ne!(tampered, token);
    assert_eq!(
        kind_of(
            sas_client(&stub, tampered)
                .put(BUCKET, "sas/other.bin", pattern(1, 1), None)
                .await
        ),
        ErrorKind::SignatureDoesNotMatch
    );
    let anonymous = OriginClient::new(OriginConfig::Azure {
        endpoint: stub.azure_url().unwrap(),
        account: ACCOUNT.into(),
        key: None,
        sas: None,
    })
    .unwrap();
    assert_eq!(
        kind_of(anonymous.get(BUCKET, "sas/other.bin", None, None).await),
        ErrorKind::MissingCredentials
    );
    assert_eq!(
        owner.head(BUCKET, "sas/other.bin").await.unwrap().size,
        10,
        "refused writes changed nothing"
    );
    stub.shutdown().await;
}

/// The `truncate` fault must answer with headers and then cut the body, so a client sees
/// a started response whose body fails — not a connection closed before any answer
/// (that is the `reset` fault). On bodies whose first half fits in hyper's write buffer
/// (about 400 KiB), the stub cuts before anything was flushed.
#[tokio::test]
async fn truncate_fault_on_small_bodies_sends_headers_first() {
    let stub = start_stub().await;
    stub.faults()
        .set(FaultConfig {
            error_rate: 1.0,
            error_kinds: vec![FaultKind::Truncate],
            ..FaultConfig::default()
        })
        .unwrap();
    let m = medium();
    for flavor in [Flavor::S3, Flavor::Azure] {
        let c = client(&stub, flavor, true);
        for range in [
            None,
            Some(ByteRange {
                start: 1000,
                end: 101_000,
            }),
        ] {
            let resp = c
                .get(BUCKET, &m.key, range, None)
                .await
                .unwrap_or_else(|e| panic!("{flavor:?} {range:?}: headers before the cut: {e}"));
            let (received, failure) = drain_until_error(resp.body).await;
            let failure = failure.expect("a truncated body never looks complete");
            assert_eq!(failure.kind(), ErrorKind::IncompleteBody);
            assert!((received.len() as u64) < range.map_or(m.size, |r| r.len()));
        }
    }
    stub.shutdown().await;
}

/// Writing an empty object is an ordinary put. HTTP/1.1 clients must send
/// `Content-Length: 0` for it: S3 answers 411 `MissingContentLength` without one, and
/// Azure's Put Blob requires the header.
#[tokio::test]
async fn put_of_an_empty_object_succeeds() {
    let stub = start_stub().await;
    for flavor in [Flavor::S3, Flavor::Azure] {
        let c = client(&stub, flavor, true);
        let key = format!("empty/{flavor:?}.bin");
        let etag = c
            .put(BUCKET, &key, Bytes::new(), None)
            .await
            .unwrap_or_else(|e| panic!("{flavor:?}: {e}"));
        let info = c.head(BUCKET, &key).await.unwrap();
        assert_eq!((info.size, info.etag.as_str()), (0, etag.as_str()));
        let got = c.get(BUCKET, &key, None, Some(&etag)).await.unwrap();
        assert!(drain(got.body).await.unwrap().is_empty());
    }
    stub.shutdown().await;
}

/// A keep-alive connection idle longer than [`ORIGIN_POOL_IDLE`] is not reused: an
/// origin that closes idle connections after 5 s (Node's default, Azurite's) could
/// close it just as a request goes out on it, and a streamed upload sent on it then
/// fails with nothing to resend (seen in CI as a 503 on UploadPart over Azurite). A
/// plain HTTP server here counts the connections its HEAD answers come on.
#[tokio::test]
async fn an_idle_origin_connection_is_not_reused_past_the_pool_idle_time() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use talon_protocols::origin::ORIGIN_POOL_IDLE;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 << 10];
                let mut seen = Vec::new();
                loop {
                    let Ok(n) = conn.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\netag: \"abc\"\r\n\
                                      last-modified: Wed, 02 Dec 2026 10:00:00 GMT\r\n\r\n";
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    let client = OriginClient::new(OriginConfig::S3 {
        endpoint: format!("http://{addr}"),
        region: "us-east-1".into(),
        credentials: None,
        virtual_hosted: false,
    })
    .unwrap();
    for _ in 0..2 {
        let info = client.head("bucket", "key").await.unwrap();
        assert_eq!((info.size, info.etag.as_str()), (5, "\"abc\""));
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1, "reused while fresh");
    // The idle time itself is what is tested.
    tokio::time::sleep(ORIGIN_POOL_IDLE + Duration::from_millis(500)).await;
    client.head("bucket", "key").await.unwrap();
    assert_eq!(
        connections.load(Ordering::SeqCst),
        2,
        "a connection idle past the pool idle time was reused"
    );
}
