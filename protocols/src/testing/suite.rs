//! The conformance suite of [`ObjectBackend`](crate::server::ObjectBackend): one set of
//! cases, written once against the HTTP surface of the S3 and Azure Blob servers, that
//! every backend must pass unchanged — the in-memory reference
//! ([`super::memory::MemoryBackend`]), the origin stub's store and the gateway's
//! cache-and-relay backend.
//!
//! Each case makes its own bucket (container), so cases do not see each other, and says
//! what a user would check: status, error code, headers, and bytes by SHA-256. A refusal
//! is followed by a read showing that nothing changed. [`run`] runs every case and
//! reports every failure, not just the first.
//!
//! The requests are signed by this crate's own signers (SigV4, Shared Key); the real
//! SDKs are the SDK suite's (`tests/sdk`). The suite checks the servers' answers, and a
//! backend's rules as those answers show them.

use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, Method};
use sha2::{Digest as _, Sha256};

use crate::azure::shared_key::{self, AccountKey, SharedKeyParts};
use crate::s3::sigv4::{S3Credentials, SignedBody, sign_request};

/// The Azure Blob REST version the suite speaks.
const AZURE_VERSION: &str = "2025-01-05";

/// The keys a served backend takes and the suite signs with.
#[derive(Debug, Clone)]
pub struct Keys {
    /// An S3 key that may do everything.
    pub s3: S3Credentials,
    /// The S3 region signed for.
    pub region: String,
    /// The Azure storage account.
    pub account: String,
    /// Its key (Shared Key): [`shared_key::EMULATOR_ACCOUNT_KEY`] for a local one.
    pub account_key: AccountKey,
}

impl Keys {
    /// The keys of a local deployment: an S3 key of the suite's own and the Azure
    /// emulators' public account and key.
    pub fn local() -> Keys {
        Keys {
            s3: S3Credentials {
                access_key: "conformance-access-key".into(),
                secret_key: "conformance-secret-key".into(),
                session_token: None,
            },
            region: "us-east-1".into(),
            account: "devstoreaccount1".into(),
            account_key: AccountKey::from_base64(shared_key::EMULATOR_ACCOUNT_KEY)
                .unwrap_or_else(|_| unreachable!("the emulators' key is valid base64")),
        }
    }
}

/// Where a backend is served.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The S3 front, path-style: `http://host:port`.
    pub s3_url: String,
    /// The Azure account's base URL, emulator style: `http://host:port/<account>`.
    pub azure_url: String,
    /// The keys both fronts take.
    pub keys: Keys,
}

/// A case a backend is known to fail, and why: where the backend stands on a server
/// nobody here wrote that answers otherwise than S3 or Azure (the SDK suite's strict
/// xfails, in Rust). Strict: a listed case that passes fails the run, so the list
/// cannot outlive the divergence.
#[derive(Debug, Clone, Copy)]
pub struct KnownFailure {
    /// The case's name.
    pub case: &'static str,
    /// Why it fails there.
    pub why: &'static str,
}

/// One case's outcome.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// The case's name.
    pub name: &'static str,
    /// Why the case counts as failed; `None` when it passed (or failed as listed).
    pub failure: Option<String>,
    /// How a case listed as a known failure failed, with the reason listed.
    pub failed_as_known: Option<String>,
}

/// Every case's outcome.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// In the order run.
    pub cases: Vec<CaseResult>,
}

impl Report {
    /// The failed cases, each with its reason, one per line; empty when all passed.
    pub fn failures(&self) -> String {
        self.cases
            .iter()
            .filter_map(|c| c.failure.as_ref().map(|f| format!("{}: {f}", c.name)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Panics naming every failed case (for a test).
    ///
    /// # Panics
    /// When any case failed, or none ran.
    pub fn assert_passed(&self) {
        assert!(!self.cases.is_empty(), "no conformance case ran");
        for c in &self.cases {
            if let Some(how) = &c.failed_as_known {
                eprintln!("conformance: {} failed as known: {how}", c.name);
            }
        }
        let failures = self.failures();
        assert!(failures.is_empty(), "conformance cases failed:\n{failures}");
    }
}

type CaseFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send + 'a>>;
type Outcome = Result<(), String>;

/// A case: the client, and the bucket (container) it may make and use.
type Case = for<'a> fn(&'a Client, String) -> CaseFuture<'a>;

/// Every case, by name.
fn cases() -> Vec<(&'static str, Case)> {
    vec![
        ("s3_bucket_lifecycle", |c, b| {
            Box::pin(s3_bucket_lifecycle(c, b))
        }),
        ("s3_put_get_head", |c, b| Box::pin(s3_put_get_head(c, b))),
        ("s3_ranges", |c, b| Box::pin(s3_ranges(c, b))),
        ("s3_conditionals", |c, b| Box::pin(s3_conditionals(c, b))),
        ("s3_listing", |c, b| Box::pin(s3_listing(c, b))),
        ("s3_missing_and_delete", |c, b| {
            Box::pin(s3_missing_and_delete(c, b))
        }),
        ("s3_copy", |c, b| Box::pin(s3_copy(c, b))),
        ("s3_copy_source_conditions", |c, b| {
            Box::pin(s3_copy_source_conditions(c, b))
        }),
        ("s3_multipart", |c, b| Box::pin(s3_multipart(c, b))),
        ("s3_multipart_refusals", |c, b| {
            Box::pin(s3_multipart_refusals(c, b))
        }),
        ("s3_part_numbers", |c, b| Box::pin(s3_part_numbers(c, b))),
        ("s3_etags_are_md5", |c, b| Box::pin(s3_etags_are_md5(c, b))),
        ("s3_refused_signatures", |c, b| {
            Box::pin(s3_refused_signatures(c, b))
        }),
        ("azure_put_get_head", |c, b| {
            Box::pin(azure_put_get_head(c, b))
        }),
        ("azure_ranges_and_conditionals", |c, b| {
            Box::pin(azure_ranges_and_conditionals(c, b))
        }),
        ("azure_listing", |c, b| Box::pin(azure_listing(c, b))),
        ("azure_blocks", |c, b| Box::pin(azure_blocks(c, b))),
        ("azure_missing_and_delete", |c, b| {
            Box::pin(azure_missing_and_delete(c, b))
        }),
        ("azure_refused_signature", |c, b| {
            Box::pin(azure_refused_signature(c, b))
        }),
    ]
}

/// Runs every case against `endpoint`, each in a bucket of its own named after `run`
/// (lower-case letters and digits; a run of its own per backend keeps two runs against
/// one origin apart). `known` lists the cases this backend is known to fail.
pub async fn run(endpoint: &Endpoint, run: &str, known: &[KnownFailure]) -> Report {
    let client = Client {
        http: reqwest::Client::new(),
        endpoint: endpoint.clone(),
    };
    let all = cases();
    let mut report = Report::default();
    for k in known {
        if !all.iter().any(|(name, _)| *name == k.case) {
            report.cases.push(CaseResult {
                name: k.case,
                failure: Some("listed as a known failure, but there is no such case".into()),
                failed_as_known: None,
            });
        }
    }
    for (i, (name, case)) in all.into_iter().enumerate() {
        let bucket = format!("conf-{run}-{i}");
        let outcome = case(&client, bucket).await;
        let listed = known.iter().find(|k| k.case == name);
        let (failure, failed_as_known) = match (outcome, listed) {
            (Ok(()), None) => (None, None),
            (Err(why), None) => (Some(why), None),
            (Err(why), Some(k)) => (None, Some(format!("{why} (known: {})", k.why))),
            (Ok(()), Some(k)) => (
                Some(format!(
                    "passed, but is listed as a known failure ({}): take it off the list",
                    k.why
                )),
                None,
            ),
        };
        report.cases.push(CaseResult {
            name,
            failure,
            failed_as_known,
        });
    }
    report
}

/// An answer, read whole.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The error code: S3's `<Code>` or Azure's `x-ms-error-code`.
    fn code(&self) -> String {
        if let Some(code) = self.header("x-ms-error-code") {
            return code.to_owned();
        }
        xml_values(&self.body, "Code")
            .into_iter()
            .next()
            .unwrap_or_default()
    }

    /// The status and the error code, for a message.
    fn said(&self) -> String {
        format!("{} {}", self.status, self.code())
    }

    fn expect(&self, status: u16, what: &str) -> Outcome {
        check(self.status == status, || {
            format!(
                "{what}: expected {status}, got {} ({})",
                self.said(),
                String::from_utf8_lossy(&self.body[..self.body.len().min(300)])
            )
        })
    }

    fn expect_error(&self, status: u16, code: &str, what: &str) -> Outcome {
        check(self.status == status && self.code() == code, || {
            format!("{what}: expected {status} {code}, got {}", self.said())
        })
    }
}

/// The texts of every `<tag>…</tag>` in an XML document, in order.
fn xml_values(body: &[u8], tag: &str) -> Vec<String> {
    let text = String::from_utf8_lossy(body);
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = text.as_ref();
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else { break };
        out.push(after[..end].to_owned());
        rest = &after[end + close.len()..];
    }
    out
}

fn check(ok: bool, why: impl FnOnce() -> String) -> Outcome {
    if ok { Ok(()) } else { Err(why()) }
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn quoted_md5(bytes: &[u8]) -> String {
    use md5::Digest as _;
    format!("\"{}\"", hex::encode(md5::Md5::digest(bytes)))
}

/// Deterministic bytes that differ by `seed`.
fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8))
        .collect::<Vec<u8>>()
        .into()
}

/// Signs and sends requests to both fronts.
struct Client {
    http: reqwest::Client,
    endpoint: Endpoint,
}

impl Client {
    /// An S3 request, signed with the endpoint's key (or `with` instead).
    async fn s3_as(
        &self,
        credentials: &S3Credentials,
        method: Method,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Answer, String> {
        let url = format!("{}{path_and_query}", self.endpoint.s3_url);
        let authority = url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let mut to_sign: Vec<(&str, &str)> = vec![("host", authority.as_str())];
        to_sign.extend_from_slice(headers);
        let signed = sign_request(
            method.as_str(),
            &url,
            &to_sign,
            SignedBody::Bytes(&body),
            credentials,
            &self.endpoint.keys.region,
            SystemTime::now(),
        )
        .map_err(|e| format!("signing {method} {url}: {}", e.message()))?;
        let mut req = with_length(self.http.request(method.clone(), &url), &method, body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        for (k, v) in &signed {
            req = req.header(k.as_str(), v.as_str());
        }
        send(req, &method, &url).await
    }

    async fn s3(
        &self,
        method: Method,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Answer, String> {
        let credentials = self.endpoint.keys.s3.clone();
        self.s3_as(&credentials, method, path_and_query, headers, body)
            .await
    }

    /// An Azure request to `path_and_query` under the account, signed with Shared Key by
    /// `key` (the endpoint's by default).
    async fn azure_as(
        &self,
        key: &AccountKey,
        method: Method,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Answer, String> {
        let url = format!("{}{path_and_query}", self.endpoint.azure_url);
        let after_host = url
            .trim_start_matches("http://")
            .split_once('/')
            .map_or("", |(_, p)| p);
        let (raw_path, raw_query) = after_host.split_once('?').unwrap_or((after_host, ""));
        let raw_path = format!("/{raw_path}");
        let date = crate::dates::format_http_date(SystemTime::now());
        let length = body.len().to_string();
        let mut all: Vec<(&str, &str)> =
            vec![("x-ms-version", AZURE_VERSION), ("x-ms-date", &date)];
        all.extend_from_slice(headers);
        let mut map = HeaderMap::new();
        for (k, v) in &all {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).map_err(|e| e.to_string())?,
                http::HeaderValue::from_str(v).map_err(|e| e.to_string())?,
            );
        }
        if !body.is_empty() {
            // Signed as the client will send it (reqwest sets it from the body).
            map.insert(
                http::header::CONTENT_LENGTH,
                http::HeaderValue::from_str(&length).map_err(|e| e.to_string())?,
            );
        }
        let parts = SharedKeyParts {
            method: method.as_str(),
            raw_path: &raw_path,
            raw_query,
            headers: &map,
        };
        let authorization = shared_key::authorization(&parts, &self.endpoint.keys.account, key);
        let mut req = with_length(self.http.request(method.clone(), &url), &method, body)
            .header("authorization", authorization);
        for (k, v) in &all {
            req = req.header(*k, *v);
        }
        send(req, &method, &url).await
    }

    async fn azure(
        &self,
        method: Method,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Answer, String> {
        let key = self.endpoint.keys.account_key.clone();
        self.azure_as(&key, method, path_and_query, headers, body)
            .await
    }

    /// Creates the case's bucket through the S3 front.
    async fn s3_bucket(&self, bucket: &str) -> Outcome {
        self.s3(Method::PUT, &format!("/{bucket}"), &[], Bytes::new())
            .await?
            .expect(200, "CreateBucket")
    }

    /// Puts an object through the S3 front; gives its `ETag`.
    async fn s3_put(&self, bucket: &str, key: &str, body: Bytes) -> Result<String, String> {
        let a = self
            .s3(Method::PUT, &format!("/{bucket}/{key}"), &[], body)
            .await?;
        a.expect(200, &format!("PutObject {key}"))?;
        Ok(a.header("etag").unwrap_or_default().to_owned())
    }

    /// Gets an object through the S3 front and checks its bytes.
    async fn s3_expect_bytes(&self, bucket: &str, key: &str, want: &[u8], what: &str) -> Outcome {
        let a = self
            .s3(Method::GET, &format!("/{bucket}/{key}"), &[], Bytes::new())
            .await?;
        a.expect(200, what)?;
        check(sha(&a.body) == sha(want), || {
            format!(
                "{what}: the body is not the object's ({} bytes, wanted {})",
                a.body.len(),
                want.len()
            )
        })
    }

    /// Creates the case's container through the Azure front.
    async fn azure_container(&self, container: &str) -> Outcome {
        self.azure(
            Method::PUT,
            &format!("/{container}?restype=container"),
            &[],
            Bytes::new(),
        )
        .await?
        .expect(201, "Create Container")
    }

    /// Puts a block blob through the Azure front; gives its `ETag`.
    async fn azure_put(&self, container: &str, blob: &str, body: Bytes) -> Result<String, String> {
        let a = self
            .azure(
                Method::PUT,
                &format!("/{container}/{blob}"),
                &[("x-ms-blob-type", "BlockBlob")],
                body,
            )
            .await?;
        a.expect(201, &format!("Put Blob {blob}"))?;
        Ok(a.header("etag").unwrap_or_default().to_owned())
    }

    async fn azure_expect_bytes(
        &self,
        container: &str,
        blob: &str,
        want: &[u8],
        what: &str,
    ) -> Outcome {
        let a = self
            .azure(
                Method::GET,
                &format!("/{container}/{blob}"),
                &[],
                Bytes::new(),
            )
            .await?;
        a.expect(200, what)?;
        check(sha(&a.body) == sha(want), || {
            format!("{what}: the body is not the blob's")
        })
    }
}

/// Sets the body; an empty PUT or POST says its length, as the SDKs do (reqwest leaves
/// it out, and S3 answers 411).
fn with_length(
    req: reqwest::RequestBuilder,
    method: &Method,
    body: Bytes,
) -> reqwest::RequestBuilder {
    let req = if body.is_empty() && matches!(*method, Method::PUT | Method::POST) {
        req.header(http::header::CONTENT_LENGTH, "0")
    } else {
        req
    };
    req.body(body)
}

async fn send(req: reqwest::RequestBuilder, method: &Method, url: &str) -> Result<Answer, String> {
    let resp = req
        .send()
        .await
        .map_err(|e| format!("{method} {url}: {e}"))?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp
        .bytes()
        .await
        .map_err(|e| format!("{method} {url}: reading the body: {e}"))?;
    Ok(Answer {
        status,
        headers,
        body,
    })
}

// ---- S3 ----

async fn s3_bucket_lifecycle(c: &Client, bucket: String) -> Outcome {
    c.s3_bucket(&bucket).await?;
    c.s3(Method::HEAD, &format!("/{bucket}"), &[], Bytes::new())
        .await?
        .expect(200, "HeadBucket")?;
    let listed = c.s3(Method::GET, "/", &[], Bytes::new()).await?;
    listed.expect(200, "ListBuckets")?;
    check(xml_values(&listed.body, "Name").contains(&bucket), || {
        format!("ListBuckets does not name {bucket}")
    })?;
    c.s3_put(&bucket, "keep", pattern(10, 1)).await?;
    c.s3(Method::DELETE, &format!("/{bucket}"), &[], Bytes::new())
        .await?
        .expect_error(
            409,
            "BucketNotEmpty",
            "DeleteBucket of a bucket with an object",
        )?;
    c.s3_expect_bytes(
        &bucket,
        "keep",
        &pattern(10, 1),
        "the object after a refused DeleteBucket",
    )
    .await?;
    c.s3(
        Method::DELETE,
        &format!("/{bucket}/keep"),
        &[],
        Bytes::new(),
    )
    .await?
    .expect(204, "DeleteObject")?;
    c.s3(Method::DELETE, &format!("/{bucket}"), &[], Bytes::new())
        .await?
        .expect(204, "DeleteBucket")?;
    c.s3(Method::HEAD, &format!("/{bucket}"), &[], Bytes::new())
        .await?
        .expect(404, "HeadBucket after DeleteBucket")?;
    c.s3(Method::GET, &format!("/{bucket}/keep"), &[], Bytes::new())
        .await?
        .expect_error(404, "NoSuchBucket", "GetObject in a deleted bucket")
}

async fn s3_put_get_head(c: &Client, bucket: String) -> Outcome {
    c.s3_bucket(&bucket).await?;
    let body = pattern(70_000, 2);
    let put = c
        .s3(
            Method::PUT,
            &format!("/{bucket}/dir/object.txt"),
            &[
                ("content-type", "text/plain"),
                ("x-amz-meta-colour", "blue"),
                ("cache-control", "max-age=60"),
            ],
            body.clone(),
        )
        .await?;
    put.expect(200, "PutObject")?;
    let etag = put.header("etag").unwrap_or_default().to_owned();
    check(etag.starts_with('"') && etag.len() > 2, || {
        format!("PutObject's ETag {etag:?} is no quoted tag")
    })?;
    let get = c
        .s3(
            Method::GET,
            &format!("/{bucket}/dir/object.txt"),
            &[],
            Bytes::new(),
        )
        .await?;
    get.expect(200, "GetObject")?;
    check(sha(&get.body) == sha(&body), || {
        "GetObject's body differs".into()
    })?;
    for (name, want) in [
        ("etag", etag.clone()),
        ("content-length", body.len().to_string()),
        ("content-type", "text/plain".into()),
        ("x-amz-meta-colour", "blue".into()),
        ("cache-control", "max-age=60".into()),
    ] {
        check(get.header(name) == Some(want.as_str()), || {
            format!("GetObject's {name} is {:?}, not {want:?}", get.header(name))
        })?;
    }
    check(get.header("last-modified").is_some(), || {
        "GetObject has no Last-Modified".into()
    })?;
    let head = c
        .s3(
            Method::HEAD,
            &format!("/{bucket}/dir/object.txt"),
            &[],
            Bytes::new(),
        )
        .await?;
    head.expect(200, "HeadObject")?;
    check(
        head.body.is_empty()
            && head.header("content-length") == Some(body.len().to_string().as_str())
            && head.header("etag") == get.header("etag")
            && head.header("x-amz-meta-colour") == Some("blue"),
        || "HeadObject's headers differ from GetObject's, or it has a body".into(),
    )?;
    // An empty object.
    c.s3_put(&bucket, "empty", Bytes::new()).await?;
    c.s3_expect_bytes(&bucket, "empty", b"", "GetObject of an empty object")
        .await?;
    // Overwritten: the new bytes, the new tag.
    let newer = pattern(1000, 3);
    let tag = c.s3_put(&bucket, "dir/object.txt", newer.clone()).await?;
    check(tag != etag, || {
        "an overwrite with other bytes kept the ETag".into()
    })?;
    c.s3_expect_bytes(
        &bucket,
        "dir/object.txt",
        &newer,
        "GetObject after an overwrite",
    )
    .await
}

async fn s3_ranges(c: &Client, bucket: String) -> Outcome {
    c.s3_bucket(&bucket).await?;
    let body = pattern(1000, 4);
    c.s3_put(&bucket, "r", body.clone()).await?;
    for (range, start, end) in [
        ("bytes=100-199", 100usize, 200usize),
        ("bytes=-10", 990, 1000),
        ("bytes=990-", 990, 1000),
        ("bytes=900-5000", 900, 1000),
        ("bytes=0-0", 0, 1),
    ] {
        let a = c
            .s3(
                Method::GET,
                &format!("/{bucket}/r"),
                &[("range", range)],
                Bytes::new(),
            )
            .await?;
        a.expect(206, &format!("GetObject {range}"))?;
        let want_range = format!("bytes {start}-{}/1000", end - 1);
        check(
            a.header("content-range") == Some(want_range.as_str())
                && a.body[..] == body[start..end],
            || {
                format!(
                    "GetObject {range}: Content-Range {:?} (wanted {want_range}), {} bytes",
                    a.header("content-range"),
                    a.body.len()
                )
            },
        )?;
    }
    let past = c
        .s3(
            Method::GET,
            &format!("/{bucket}/r"),
            &[("range", "bytes=1000-1100")],
            Bytes::new(),
        )
        .await?;
    past.expect_error(416, "InvalidRange", "GetObject past the end")?;
    check(past.header("content-range") == Some("bytes */1000"), || {
        format!(
            "a 416's Content-Range is {:?}",
            past.header("content-range")
        )
    })
}

async fn s3_conditionals(c: &Client, bucket: String) -> Outcome {
    c.s3_bucket(&bucket).await?;
    let body = pattern(500, 5);
    let etag = c.s3_put(&bucket, "c", body.clone()).await?;
    let path = format!("/{bucket}/c");
    let not_modified = c
        .s3(
            Method::GET,
            &path,
            &[("if-none-match", &etag)],
            Bytes::new(),
        )
        .await?;
    not_modified.expect(304, "GetObject If-None-Match: its ETag")?;
    check(
        not_modified.body.is_empty() && not_modified.header("etag") == Some(etag.as_str()),
        || "a 304 carries a body or no ETag".into(),
    )?;
    c.s3(
        Method::GET,
        &path,
        &[("if-match", "\"0123\"")],
        Bytes::new(),
    )
    .await?
    .expect_error(412, "PreconditionFailed", "GetObject If-Match: another tag")?;
    let matched = c
        .s3(Method::GET, &path, &[("if-match", &etag)], Bytes::new())
        .await?;
    matched.expect(200, "GetObject If-Match: its ETag")?;
    c.s3(
        Method::GET,
        &path,
        &[("if-modified-since", "Sat, 01 Jan 2000 00:00:00 GMT")],
        Bytes::new(),
    )
    .await?
    .expect(200, "GetObject If-Modified-Since: long ago")?;
    // A conditional write that fails changes nothing.
    c.s3(
        Method::PUT,
        &path,
        &[("if-none-match", "*")],
        pattern(10, 6),
    )
    .await?
    .expect_error(
        412,
        "PreconditionFailed",
        "PutObject If-None-Match: * over an object",
    )?;
    c.s3(
        Method::PUT,
        &path,
        &[("if-match", "\"0123\"")],
        pattern(10, 6),
    )
    .await?
    .expect_error(412, "PreconditionFailed", "PutObject If-Match: another tag")?;
    c.s3_expect_bytes(
        &bucket,
        "c",
        &body,
        "the object after refused conditional writes",
    )
    .await?;
    c.s3(
        Method::PUT,
        &format!("/{bucket}/fresh"),
        &[("if-none-match", "*")],
        pattern(10, 7),
    )
    .await?
    .expect(200, "PutObject If-None-Match: * of a new key")
}

async fn s3_listing(c: &Client, bucket: String) -> Outcome {
    c.s3_bucket(&bucket).await?;
    let keys = ["a/1", "a/2", "b/1", "c", "d e+f"];
    for (i, k) in keys.iter().enumerate() {
        c.s3_put(
            &bucket,
            &k.replace(' ', "%20").replace('+', "%2B"),
            pattern(i + 1, 8),
        )
        .await?;
    }
    let rolled = c
        .s3(
            Method::GET,
            &format!("/{bucket}?list-type=2&delimiter=%2F"),
            &[],
            Bytes::new(),
        )
        .await?;
    rolled.expect(200, "ListObjectsV2 delimiter /")?;
    let prefixes = xml_values(&rolled.body, "Prefix")
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>();
    let listed = xml_values(&rolled.body, "Key");
    check(prefixes == ["a/", "b/"] && listed == ["c", "d e+f"], || {
        format!("ListObjectsV2 delimiter /: prefixes {prefixes:?}, keys {listed:?}")
    })?;
    let under_a = c
        .s3(
            Method::GET,
            &format!("/{bucket}?list-type=2&prefix=a%2F"),
            &[],
            Bytes::new(),
        )
        .await?;
    under_a.expect(200, "ListObjectsV2 prefix a/")?;
    let listed = xml_values(&under_a.body, "Key");
    check(listed == ["a/1", "a/2"], || {
        format!("ListObjectsV2 prefix a/: {listed:?}")
    })?;
    check(xml_values(&under_a.body, "Size") == ["1", "2"], || {
        "ListObjectsV2's sizes".into()
    })?;
    // One key a page, by continuation token.
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..10 {
        let mut q = format!("/{bucket}?list-type=2&max-keys=1");
        if let Some(t) = &token {
            q.push_str("&continuation-token=");
            q.push_str(
                &percent_encoding::utf8_percent_encode(t, percent_encoding::NON_ALPHANUMERIC)
                    .to_string(),
            );
        }
        let page = c.s3(Method::GET, &q, &[], Bytes::new()).await?;
        page.expect(200, "ListObjectsV2 max-keys 1")?;
        seen.extend(xml_values(&page.body, "Key"));
        let truncated = xml_values(&page.body, "IsTruncated")
            .first()
            .map(String::as_str)
            == Some("true");
        token = xml_values(&page.body, "NextContinuationToken")
            .into_iter()
            .next();
        if !truncated {
            break;
        }
        check(token.is_some(), || {
            "a truncated page has no NextContinuationToken".into()
        })?;
    }
    check(seen == keys, || {
        format!("paging one key at a time gave {seen:?}")
    })?;
    // V1 from a marker.
    let v1 = c
        .s3(
            Method::GET,
            &format!("/{bucket}?marker=b%2F1"),
            &[],
            Bytes::new(),
        )
        .await?;
    v1.expect(200, "ListObjects marker b/1")?;
    let listed = xml_values(&v1.body, "Key");
    check(listed == ["c", "d e+f"], || {
        format!("ListObjects marker b/1: {listed:?}")
    })
}

async fn s3_missing_and_delete(c: &Client, bucket: String) -> Outcome {
    c.s3_bucket(&bucket).await?;
    c.s3(
        Method::GET,
        &format!("/{bucket}/nothing"),
        &[],
        Bytes::new(),
    )
    .await?
    .expect_error(404, "NoSuchKey", "GetObject of a missing key")?;
    c.s3(
        Method::HEAD,
        &format!("/{bucket}/nothing"),
        &[],
        Bytes::new(),
    )
    .await?
    .expect(404, "HeadObject of a missing key")?;
    c.s3(Method::GET, &format!("/{bucket}-none/k"), &[], Bytes::new())
        .await?
        .expect_error(404, "NoSuchBucket", "GetObject in a missing bucket")?;
    c.s3(
        Method::DELETE,
        &format!("/{bucket}/nothing"),
        &[],
        Bytes::new(),
    )
    .await?
    .expect(204, "DeleteObject of a missing key")?;
    c.s3_put(&bucket, "gone", pattern(100, 9)).await?;
    c.s3(
        Method::DELETE,
        &format!("/{bucket}/gone"),
        &[],
        Bytes::new(),
    )
    .await?
    .expect(204, "DeleteObject")?;
    c.s3(Method::GET, &format!("/{bucket}/gone"), &[], Bytes::new())
        .await?
        .expect_error(404, "NoSuchKey", "GetObject after DeleteObject")
}

async fn s3_copy(c: &Client, bucket: String) -> Outcome {
    c.s3_bucket(&bucket).await?;
    let body = pattern(3000, 10);
    c.s3(
        Method::PUT,
        &format!("/{bucket}/source"),
        &[
            ("x-amz-meta-origin", "copied"),
            ("content-type", "image/png"),
        ],
        body.clone(),
    )
    .await?
    .expect(200, "PutObject source")?;
    let source = format!("/{bucket}/source");
    let copied = c
        .s3(
            Method::PUT,
            &format!("/{bucket}/copy"),
            &[("x-amz-copy-source", &source)],
            Bytes::new(),
        )
        .await?;
    copied.expect(200, "CopyObject")?;
    let get = c
        .s3(Method::GET, &format!("/{bucket}/copy"), &[], Bytes::new())
        .await?;
    get.expect(200, "GetObject of the copy")?;
    check(
        xml_values(&copied.body, "ETag")
            .first()
            .map(|t| t.replace("&quot;", "\""))
            .as_deref()
            == get.header("etag"),
        || {
            format!(
                "CopyObject's result names another ETag than the copy has: {}",
                String::from_utf8_lossy(&copied.body)
            )
        },
    )?;
    check(
        sha(&get.body) == sha(&body)
            && get.header("x-amz-meta-origin") == Some("copied")
            && get.header("content-type") == Some("image/png"),
        || "the copy's bytes, metadata or content type differ from the source's".into(),
    )
}

async fn s3_copy_source_conditions(c: &Client, bucket: String) -> Outcome {
    c.s3_bucket(&bucket).await?;
    let etag = c.s3_put(&bucket, "source", pattern(300, 17)).await?;
    let source = format!("/{bucket}/source");
    c.s3(
        Method::PUT,
        &format!("/{bucket}/copy"),
        &[
            ("x-amz-copy-source", &source),
            ("x-amz-copy-source-if-match", &etag),
        ],
        Bytes::new(),
    )
    .await?
    .expect(200, "CopyObject with a source condition that holds")?;
    c.s3(
        Method::PUT,
        &format!("/{bucket}/copy2"),
        &[
            ("x-amz-copy-source", &source),
            ("x-amz-copy-source-if-match", "\"0123\""),
        ],
        Bytes::new(),
    )
    .await?
    .expect_error(
        412,
        "PreconditionFailed",
        "CopyObject with a failed source condition",
    )?;
    c.s3(Method::HEAD, &format!("/{bucket}/copy2"), &[], Bytes::new())
        .await?
        .expect(404, "the destination of a refused copy")
}

async fn s3_multipart(c: &Client, bucket: String) -> Outcome {
    c.s3_bucket(&bucket).await?;
    let path = format!("/{bucket}/big");
    let create = c
        .s3(
            Method::POST,
            &format!("{path}?uploads"),
            &[("x-amz-meta-parts", "two")],
            Bytes::new(),
        )
        .await?;
    create.expect(200, "CreateMultipartUpload")?;
    let id = xml_values(&create.body, "UploadId")
        .into_iter()
        .next()
        .ok_or("CreateMultipartUpload gave no UploadId")?;
    let first = pattern(5 << 20, 11);
    let second = pattern(1000, 12);
    let mut tags = Vec::new();
    for (n, part) in [(1, &first), (2, &second)] {
        let a = c
            .s3(
                Method::PUT,
                &format!("{path}?partNumber={n}&uploadId={id}"),
                &[],
                part.clone(),
            )
            .await?;
        a.expect(200, &format!("UploadPart {n}"))?;
        tags.push(a.header("etag").unwrap_or_default().to_owned());
    }
    let listed = c
        .s3(
            Method::GET,
            &format!("{path}?uploadId={id}"),
            &[],
            Bytes::new(),
        )
        .await?;
    listed.expect(200, "ListParts")?;
    check(xml_values(&listed.body, "PartNumber") == ["1", "2"], || {
        "ListParts does not list parts 1 and 2".into()
    })?;
    let done = c
        .s3(
            Method::POST,
            &format!("{path}?uploadId={id}"),
            &[],
            completion(&[(1, &tags[0]), (2, &tags[1])]),
        )
        .await?;
    done.expect(200, "CompleteMultipartUpload")?;
    let etag = xml_values(&done.body, "ETag")
        .into_iter()
        .next()
        .unwrap_or_default()
        .replace("&quot;", "\"");
    let mut whole = first.to_vec();
    whole.extend_from_slice(&second);
    c.s3_expect_bytes(&bucket, "big", &whole, "GetObject of the completed upload")
        .await?;
    let head = c.s3(Method::HEAD, &path, &[], Bytes::new()).await?;
    check(head.header("etag") == Some(etag.as_str()), || {
        format!(
            "CompleteMultipartUpload's ETag {etag} is not the object's {:?}",
            head.header("etag")
        )
    })?;
    check(head.header("x-amz-meta-parts") == Some("two"), || {
        "the completed object lost the metadata given at CreateMultipartUpload".into()
    })?;
    Ok(())
}

/// Reads by part number: each part of a completed upload is its own bytes, with the
/// parts count; past the last part is refused.
async fn s3_part_numbers(c: &Client, bucket: String) -> Outcome {
    c.s3_bucket(&bucket).await?;
    let path = format!("/{bucket}/parts");
    let create = c
        .s3(Method::POST, &format!("{path}?uploads"), &[], Bytes::new())
        .await?;
    create.expect(200, "CreateMultipartUpload")?;
    let id = xml_values(&create.body, "UploadId")
        .into_iter()
        .next()
        .ok_or("CreateMultipartUpload gave no UploadId")?;
    let parts = [pattern(5 << 20, 29), pattern(777, 30)];
    let mut tags = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let a = c
            .s3(
                Method::PUT,
                &format!("{path}?partNumber={}&uploadId={id}", i + 1),
                &[],
                part.clone(),
            )
            .await?;
        a.expect(200, "UploadPart")?;
        tags.push(a.header("etag").unwrap_or_default().to_owned());
    }
    c.s3(
        Method::POST,
        &format!("{path}?uploadId={id}"),
        &[],
        completion(&[(1, &tags[0]), (2, &tags[1])]),
    )
    .await?
    .expect(200, "CompleteMultipartUpload")?;
    for (i, part) in parts.iter().enumerate() {
        let n = i + 1;
        let a = c
            .s3(
                Method::GET,
                &format!("{path}?partNumber={n}"),
                &[],
                Bytes::new(),
            )
            .await?;
        a.expect(206, &format!("GetObject partNumber={n}"))?;
        check(
            sha(&a.body) == sha(part) && a.header("x-amz-mp-parts-count") == Some("2"),
            || format!("GetObject partNumber={n}: not that part's bytes, or no parts count"),
        )?;
    }
    let past = c
        .s3(
            Method::GET,
            &format!("{path}?partNumber=3"),
            &[],
            Bytes::new(),
        )
        .await?;
    check((400..500).contains(&past.status), || {
        format!(
            "GetObject partNumber=3 of two parts answered {}",
            past.said()
        )
    })
}

/// A CompleteMultipartUpload document listing `parts` (number, ETag).
fn completion(parts: &[(u32, &str)]) -> Bytes {
    let mut x = String::from("<CompleteMultipartUpload>");
    for (n, tag) in parts {
        x.push_str(&format!(
            "<Part><PartNumber>{n}</PartNumber><ETag>{tag}</ETag></Part>"
        ));
    }
    x.push_str("</CompleteMultipartUpload>");
    Bytes::from(x)
}

async fn s3_multipart_refusals(c: &Client, bucket: String) -> Outcome {
    c.s3_bucket(&bucket).await?;
    // Parts listed out of order, then a small part other than the last: both refused,
    // and no object is made.
    let small = c
        .s3(
            Method::POST,
            &format!("/{bucket}/small?uploads"),
            &[],
            Bytes::new(),
        )
        .await?;
    let small_id = xml_values(&small.body, "UploadId")
        .into_iter()
        .next()
        .unwrap_or_default();
    let mut small_tags = Vec::new();
    for n in 1..=2 {
        let a = c
            .s3(
                Method::PUT,
                &format!("/{bucket}/small?partNumber={n}&uploadId={small_id}"),
                &[],
                pattern(100 * n as usize, 13),
            )
            .await?;
        a.expect(200, "UploadPart (small)")?;
        small_tags.push(a.header("etag").unwrap_or_default().to_owned());
    }
    c.s3(
        Method::POST,
        &format!("/{bucket}/small?uploadId={small_id}"),
        &[],
        completion(&[(2, &small_tags[1]), (1, &small_tags[0])]),
    )
    .await?
    .expect_error(
        400,
        "InvalidPartOrder",
        "CompleteMultipartUpload listing its parts out of order",
    )?;
    c.s3(
        Method::POST,
        &format!("/{bucket}/small?uploadId={small_id}"),
        &[],
        completion(&[(1, &small_tags[0]), (2, &small_tags[1])]),
    )
    .await?
    .expect_error(
        400,
        "EntityTooSmall",
        "CompleteMultipartUpload with a small first part",
    )?;
    c.s3(Method::HEAD, &format!("/{bucket}/small"), &[], Bytes::new())
        .await?
        .expect(404, "the object of a refused completion")?;
    c.s3(
        Method::DELETE,
        &format!("/{bucket}/small?uploadId={small_id}"),
        &[],
        Bytes::new(),
    )
    .await?
    .expect(204, "AbortMultipartUpload")?;
    c.s3(
        Method::PUT,
        &format!("/{bucket}/small?partNumber=3&uploadId={small_id}"),
        &[],
        pattern(10, 14),
    )
    .await?
    .expect_error(404, "NoSuchUpload", "UploadPart to an aborted upload")
}

/// S3's entity tags: a PutObject's and a copy's are the MD5 of the bytes, a completed
/// upload's the MD5 of its parts' MD5s with `-N` (what clients check downloads with).
async fn s3_etags_are_md5(c: &Client, bucket: String) -> Outcome {
    c.s3_bucket(&bucket).await?;
    let body = pattern(4000, 18);
    let etag = c.s3_put(&bucket, "md5", body.clone()).await?;
    check(etag == quoted_md5(&body), || {
        format!(
            "PutObject's ETag {etag} is not the body's MD5 {}",
            quoted_md5(&body)
        )
    })?;
    let copied = c
        .s3(
            Method::PUT,
            &format!("/{bucket}/copy"),
            &[("x-amz-copy-source", &format!("/{bucket}/md5"))],
            Bytes::new(),
        )
        .await?;
    copied.expect(200, "CopyObject")?;
    let copy_tag = xml_values(&copied.body, "ETag")
        .into_iter()
        .next()
        .unwrap_or_default()
        .replace("&quot;", "\"");
    check(copy_tag == quoted_md5(&body), || {
        format!("CopyObject's ETag {copy_tag} is not the bytes' MD5")
    })?;
    let create = c
        .s3(
            Method::POST,
            &format!("/{bucket}/mp?uploads"),
            &[],
            Bytes::new(),
        )
        .await?;
    create.expect(200, "CreateMultipartUpload")?;
    let id = xml_values(&create.body, "UploadId")
        .into_iter()
        .next()
        .ok_or("CreateMultipartUpload gave no UploadId")?;
    let part = pattern(100, 19);
    let put = c
        .s3(
            Method::PUT,
            &format!("/{bucket}/mp?partNumber=1&uploadId={id}"),
            &[],
            part.clone(),
        )
        .await?;
    put.expect(200, "UploadPart")?;
    let part_tag = put.header("etag").unwrap_or_default().to_owned();
    check(part_tag == quoted_md5(&part), || {
        format!("UploadPart's ETag {part_tag} is not the part's MD5")
    })?;
    let done = c
        .s3(
            Method::POST,
            &format!("/{bucket}/mp?uploadId={id}"),
            &[],
            completion(&[(1, &part_tag)]),
        )
        .await?;
    done.expect(200, "CompleteMultipartUpload")?;
    let tag = xml_values(&done.body, "ETag")
        .into_iter()
        .next()
        .unwrap_or_default()
        .replace("&quot;", "\"");
    let want = {
        use md5::Digest as _;
        let inner = md5::Md5::digest(&part);
        format!("\"{}-1\"", hex::encode(md5::Md5::digest(inner)))
    };
    check(tag == want, || {
        format!("a one-part upload's ETag is {tag}, not {want}")
    })
}

async fn s3_refused_signatures(c: &Client, bucket: String) -> Outcome {
    c.s3_bucket(&bucket).await?;
    let body = pattern(200, 15);
    c.s3_put(&bucket, "s", body.clone()).await?;
    let keys = &c.endpoint.keys.s3;
    let wrong_secret = S3Credentials {
        secret_key: format!("{}x", keys.secret_key),
        ..keys.clone()
    };
    c.s3_as(
        &wrong_secret,
        Method::PUT,
        &format!("/{bucket}/s"),
        &[],
        pattern(200, 16),
    )
    .await?
    .expect_error(
        403,
        "SignatureDoesNotMatch",
        "PutObject signed with another secret",
    )?;
    let unknown = S3Credentials {
        access_key: "AKIAUNKNOWNKEY".into(),
        ..keys.clone()
    };
    c.s3_as(
        &unknown,
        Method::DELETE,
        &format!("/{bucket}/s"),
        &[],
        Bytes::new(),
    )
    .await?
    .expect_error(403, "InvalidAccessKeyId", "DeleteObject by an unknown key")?;
    c.s3_expect_bytes(&bucket, "s", &body, "the object after refused requests")
        .await
}

// ---- Azure Blob ----

async fn azure_put_get_head(c: &Client, container: String) -> Outcome {
    c.azure_container(&container).await?;
    let body = pattern(50_000, 20);
    let put = c
        .azure(
            Method::PUT,
            &format!("/{container}/dir/blob.bin"),
            &[
                ("x-ms-blob-type", "BlockBlob"),
                ("x-ms-blob-content-type", "application/x-test"),
                ("x-ms-meta-colour", "green"),
            ],
            body.clone(),
        )
        .await?;
    put.expect(201, "Put Blob")?;
    let etag = put.header("etag").unwrap_or_default().to_owned();
    check(!etag.is_empty(), || "Put Blob gave no ETag".into())?;
    let get = c
        .azure(
            Method::GET,
            &format!("/{container}/dir/blob.bin"),
            &[],
            Bytes::new(),
        )
        .await?;
    get.expect(200, "Get Blob")?;
    check(sha(&get.body) == sha(&body), || {
        "Get Blob's body differs".into()
    })?;
    for (name, want) in [
        ("etag", etag.as_str()),
        ("content-type", "application/x-test"),
        ("x-ms-meta-colour", "green"),
        ("x-ms-blob-type", "BlockBlob"),
    ] {
        check(get.header(name) == Some(want), || {
            format!("Get Blob's {name} is {:?}, not {want:?}", get.header(name))
        })?;
    }
    let head = c
        .azure(
            Method::HEAD,
            &format!("/{container}/dir/blob.bin"),
            &[],
            Bytes::new(),
        )
        .await?;
    head.expect(200, "Get Blob Properties")?;
    check(
        head.body.is_empty()
            && head.header("content-length") == Some(body.len().to_string().as_str())
            && head.header("etag") == Some(etag.as_str()),
        || "Get Blob Properties' headers differ, or it has a body".into(),
    )
}

async fn azure_ranges_and_conditionals(c: &Client, container: String) -> Outcome {
    c.azure_container(&container).await?;
    let body = pattern(1000, 21);
    let etag = c.azure_put(&container, "r", body.clone()).await?;
    let path = format!("/{container}/r");
    let part = c
        .azure(
            Method::GET,
            &path,
            &[("x-ms-range", "bytes=100-199")],
            Bytes::new(),
        )
        .await?;
    part.expect(206, "Get Blob x-ms-range 100-199")?;
    check(
        part.header("content-range") == Some("bytes 100-199/1000")
            && part.body[..] == body[100..200],
        || {
            format!(
                "Get Blob x-ms-range: Content-Range {:?}",
                part.header("content-range")
            )
        },
    )?;
    c.azure(
        Method::GET,
        &path,
        &[("x-ms-range", "bytes=1000-1100")],
        Bytes::new(),
    )
    .await?
    .expect_error(416, "InvalidRange", "Get Blob past the end")?;
    c.azure(
        Method::GET,
        &path,
        &[("if-none-match", &etag)],
        Bytes::new(),
    )
    .await?
    .expect(304, "Get Blob If-None-Match: its ETag")?;
    c.azure(
        Method::GET,
        &path,
        &[("if-match", "\"0x0123\"")],
        Bytes::new(),
    )
    .await?
    .expect_error(412, "ConditionNotMet", "Get Blob If-Match: another tag")?;
    c.azure(
        Method::PUT,
        &path,
        &[("x-ms-blob-type", "BlockBlob"), ("if-none-match", "*")],
        pattern(10, 22),
    )
    .await?
    .expect_error(
        412,
        "ConditionNotMet",
        "Put Blob If-None-Match: * over a blob",
    )?;
    c.azure_expect_bytes(
        &container,
        "r",
        &body,
        "the blob after a refused conditional write",
    )
    .await
}

async fn azure_listing(c: &Client, container: String) -> Outcome {
    c.azure_container(&container).await?;
    let names = ["a/1", "a/2", "b/1", "c"];
    for (i, n) in names.iter().enumerate() {
        c.azure_put(&container, n, pattern(i + 1, 23)).await?;
    }
    let rolled = c
        .azure(
            Method::GET,
            &format!("/{container}?restype=container&comp=list&delimiter=%2F"),
            &[],
            Bytes::new(),
        )
        .await?;
    rolled.expect(200, "List Blobs delimiter /")?;
    let listed = xml_values(&rolled.body, "Name");
    check(listed == ["a/", "b/", "c"], || {
        format!("List Blobs delimiter /: {listed:?}")
    })?;
    let mut seen = Vec::new();
    let mut marker = String::new();
    for _ in 0..10 {
        let mut q = format!("/{container}?restype=container&comp=list&maxresults=1");
        if !marker.is_empty() {
            q.push_str("&marker=");
            q.push_str(
                &percent_encoding::utf8_percent_encode(&marker, percent_encoding::NON_ALPHANUMERIC)
                    .to_string(),
            );
        }
        let page = c.azure(Method::GET, &q, &[], Bytes::new()).await?;
        page.expect(200, "List Blobs maxresults 1")?;
        seen.extend(xml_values(&page.body, "Name"));
        marker = xml_values(&page.body, "NextMarker")
            .into_iter()
            .next()
            .unwrap_or_default();
        if marker.is_empty() {
            break;
        }
    }
    check(seen == names, || {
        format!("paging one blob at a time gave {seen:?}")
    })
}

async fn azure_blocks(c: &Client, container: String) -> Outcome {
    c.azure_container(&container).await?;
    let path = format!("/{container}/blocks");
    let (one, two) = (pattern(3000, 24), pattern(2000, 25));
    let ids = ["YmxvY2stMQ==", "YmxvY2stMg=="];
    for (id, bytes) in ids.iter().zip([&one, &two]) {
        c.azure(
            Method::PUT,
            &format!("{path}?comp=block&blockid={}", id.replace('=', "%3D")),
            &[],
            bytes.clone(),
        )
        .await?
        .expect(201, "Put Block")?;
    }
    c.azure(Method::GET, &path, &[], Bytes::new())
        .await?
        .expect_error(
            404,
            "BlobNotFound",
            "Get Blob before its block list is committed",
        )?;
    let list = c
        .azure(
            Method::GET,
            &format!("{path}?comp=blocklist&blocklisttype=all"),
            &[],
            Bytes::new(),
        )
        .await?;
    list.expect(200, "Get Block List (uncommitted)")?;
    check(xml_values(&list.body, "Name").len() == 2, || {
        format!(
            "Get Block List before commit: {}",
            String::from_utf8_lossy(&list.body)
        )
    })?;
    let document = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList><Latest>{}</Latest><Latest>{}</Latest></BlockList>",
        ids[1], ids[0]
    );
    c.azure(
        Method::PUT,
        &format!("{path}?comp=blocklist"),
        &[],
        Bytes::from(document),
    )
    .await?
    .expect(201, "Put Block List")?;
    let mut whole = two.to_vec();
    whole.extend_from_slice(&one);
    c.azure_expect_bytes(
        &container,
        "blocks",
        &whole,
        "Get Blob of the committed blocks",
    )
    .await?;
    let bad = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList><Uncommitted>{}</Uncommitted></BlockList>",
        "bm90LXRoZXJl"
    );
    c.azure(
        Method::PUT,
        &format!("{path}?comp=blocklist"),
        &[],
        Bytes::from(bad),
    )
    .await?
    .expect_error(
        400,
        "InvalidBlockList",
        "Put Block List naming a block never put",
    )?;
    c.azure_expect_bytes(
        &container,
        "blocks",
        &whole,
        "the blob after a refused block list",
    )
    .await
}

async fn azure_missing_and_delete(c: &Client, container: String) -> Outcome {
    c.azure_container(&container).await?;
    c.azure(
        Method::GET,
        &format!("/{container}/nothing"),
        &[],
        Bytes::new(),
    )
    .await?
    .expect_error(404, "BlobNotFound", "Get Blob of a missing blob")?;
    c.azure(
        Method::GET,
        &format!("/{container}-none/b"),
        &[],
        Bytes::new(),
    )
    .await?
    .expect_error(404, "ContainerNotFound", "Get Blob in a missing container")?;
    c.azure_put(&container, "gone", pattern(100, 26)).await?;
    c.azure(
        Method::DELETE,
        &format!("/{container}/gone"),
        &[],
        Bytes::new(),
    )
    .await?
    .expect(202, "Delete Blob")?;
    c.azure(
        Method::GET,
        &format!("/{container}/gone"),
        &[],
        Bytes::new(),
    )
    .await?
    .expect_error(404, "BlobNotFound", "Get Blob after Delete Blob")?;
    c.azure(
        Method::DELETE,
        &format!("/{container}/gone"),
        &[],
        Bytes::new(),
    )
    .await?
    .expect_error(404, "BlobNotFound", "Delete Blob of a missing blob")
}

async fn azure_refused_signature(c: &Client, container: String) -> Outcome {
    c.azure_container(&container).await?;
    let body = pattern(300, 27);
    c.azure_put(&container, "s", body.clone()).await?;
    let wrong = {
        use base64::Engine as _;
        AccountKey::from_base64(&base64::engine::general_purpose::STANDARD.encode([7u8; 64]))
            .map_err(|e| format!("a wrong key: {}", e.message()))?
    };
    c.azure_as(
        &wrong,
        Method::PUT,
        &format!("/{container}/s"),
        &[("x-ms-blob-type", "BlockBlob")],
        pattern(300, 28),
    )
    .await?
    .expect_error(
        403,
        "AuthenticationFailed",
        "Put Blob signed with another key",
    )?;
    c.azure_as(
        &wrong,
        Method::DELETE,
        &format!("/{container}/s"),
        &[],
        Bytes::new(),
    )
    .await?
    .expect_error(
        403,
        "AuthenticationFailed",
        "Delete Blob signed with another key",
    )?;
    c.azure_expect_bytes(&container, "s", &body, "the blob after refused requests")
        .await
}
