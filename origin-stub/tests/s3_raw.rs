//! Raw HTTP edge cases of the stub's S3 front, as a client that signs its own requests
//! sees them: error documents, HEAD errors, odd ranges, conditional reads, oversized
//! headers, anonymous and presigned access (SigV4 and SigV2), URL-encoded listings,
//! unsafe keys, body digests, and the admin fault endpoint. Every refused write is
//! checked to have written nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use md5::Digest as _;
use talon_origin_stub::faults::{FaultConfig, FaultKind};
use talon_origin_stub::{RunningStub, StubConfig};
use talon_protocols::s3::sigv2;
use talon_protocols::s3::sigv4::{S3Credentials, SignedBody, presign_url, sign_request};
use talon_protocols::uri_encoding::{decode, decode_query_component, encode_path, encode_strict};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ACCESS_KEY: &str = "AKIARAWTEST";
const SECRET_KEY: &str = "raw/secret+key";
const REGION: &str = "us-east-1";
const BUCKET: &str = "raw";

fn creds(secret: &str) -> S3Credentials {
    S3Credentials {
        access_key: ACCESS_KEY.into(),
        secret_key: secret.into(),
        session_token: None,
    }
}

struct Env {
    stub: RunningStub,
    http: reqwest::Client,
}

#[derive(Debug)]
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The text of every `<name>` element, in order.
    fn elements(&self, name: &str) -> Vec<String> {
        elements(&self.text(), name)
    }

    fn code(&self) -> Option<String> {
        self.elements("Code").into_iter().next()
    }

    fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status, self.code().as_deref()),
            (status, Some(code)),
            "{}",
            self.text()
        );
        assert_eq!(self.header("content-type"), Some("application/xml"));
    }
}

fn elements(xml: &str, name: &str) -> Vec<String> {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(&close) else { break };
        out.push(after[..j].to_owned());
        rest = &after[j + close.len()..];
    }
    out
}

fn xml_unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

async fn env() -> Env {
    let stub = talon_origin_stub::start(StubConfig {
        s3_credentials: BTreeMap::from([(ACCESS_KEY.to_owned(), SECRET_KEY.to_owned())]),
        ..StubConfig::default()
    })
    .await
    .expect("stub starts");
    std::fs::create_dir_all(stub.data_dir().join(BUCKET)).unwrap();
    Env {
        stub,
        http: reqwest::Client::new(),
    }
}

impl Env {
    fn base(&self) -> String {
        self.stub.s3_url().unwrap()
    }

    fn object_url(&self, key: &str) -> String {
        format!("{}/{BUCKET}/{}", self.base(), encode_path(key))
    }

    fn addr(&self) -> SocketAddr {
        self.stub.s3_addr.unwrap()
    }

    /// Sends a request signed with SigV4 (`secret` may be wrong on purpose).
    async fn send_as(
        &self,
        secret: Option<&str>,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Answer {
        let host = self.addr().to_string();
        let mut all: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        if let Some(secret) = secret {
            let mut to_sign: Vec<(&str, &str)> = vec![("host", host.as_str())];
            to_sign.extend(headers.iter().copied());
            all.extend(
                sign_request(
                    method,
                    url,
                    &to_sign,
                    SignedBody::Bytes(body),
                    &creds(secret),
                    REGION,
                    SystemTime::now(),
                )
                .unwrap(),
            );
        }
        let mut req = self
            .http
            .request(method.parse().unwrap(), url)
            .body(body.to_vec());
        for (k, v) in &all {
            req = req.header(k.as_str(), v.as_str());
        }
        if method == "PUT" && body.is_empty() {
            // reqwest sends no Content-Length for an empty body; S3 requires one.
            req = req.header("content-length", "0");
        }
        let resp = req.send().await.unwrap();
        Answer {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            body: resp.bytes().await.unwrap().to_vec(),
        }
    }

    async fn send(&self, method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        self.send_as(Some(SECRET_KEY), method, url, headers, body)
            .await
    }

    async fn put(&self, key: &str, body: &[u8]) -> String {
        let a = self.send("PUT", &self.object_url(key), &[], body).await;
        assert_eq!(a.status, 200, "{}", a.text());
        a.header("etag").unwrap().to_owned()
    }

    async fn get(&self, key: &str, headers: &[(&str, &str)]) -> Answer {
        self.send("GET", &self.object_url(key), headers, b"").await
    }

    /// The keys in the bucket (unencoded listing).
    async fn keys(&self) -> Vec<String> {
        let a = self
            .send(
                "GET",
                &format!("{}/{BUCKET}?list-type=2", self.base()),
                &[],
                b"",
            )
            .await;
        assert_eq!(a.status, 200, "{}", a.text());
        a.elements("Key").iter().map(|k| xml_unescape(k)).collect()
    }

    /// Sends a signed request over a bare TCP connection, with the path exactly as given
    /// (no URL normalisation), and reads the answer until the server closes.
    async fn raw(&self, method: &str, raw_path: &str, body: &[u8]) -> (u16, String) {
        let host = self.addr().to_string();
        let url = format!("http://{host}{raw_path}");
        let signed = sign_request(
            method,
            &url,
            &[("host", host.as_str())],
            SignedBody::Bytes(body),
            &creds(SECRET_KEY),
            REGION,
            SystemTime::now(),
        )
        .unwrap();
        let mut head = format!("{method} {raw_path} HTTP/1.1\r\nhost: {host}\r\n");
        for (k, v) in signed {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!(
            "content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        ));
        let mut stream = tokio::net::TcpStream::connect(self.addr()).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(body).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        let text = String::from_utf8_lossy(&answer).into_owned();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, text)
    }
}

#[tokio::test]
async fn error_documents_carry_code_and_the_request_id() {
    let env = env().await;
    env.put("exists.txt", b"x").await;
    let wrong_secret = env
        .send_as(
            Some("wrong"),
            "GET",
            &env.object_url("exists.txt"),
            &[],
            b"",
        )
        .await;
    let cases = [
        (env.get("missing.txt", &[]).await, 404, "NoSuchKey"),
        (
            env.send("GET", &format!("{}/no-such-bucket/k", env.base()), &[], b"")
                .await,
            404,
            "NoSuchBucket",
        ),
        (wrong_secret, 403, "SignatureDoesNotMatch"),
    ];
    let mut ids = Vec::new();
    for (answer, status, code) in cases {
        answer.assert_error(status, code);
        let header_id = answer
            .header("x-amz-request-id")
            .expect("request id header");
        assert!(!header_id.is_empty());
        assert_eq!(
            answer.elements("RequestId"),
            [header_id],
            "{}",
            answer.text()
        );
        assert!(!answer.elements("Message")[0].is_empty());
        ids.push(header_id.to_owned());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "request ids are unique");
    env.stub.shutdown().await;
}

#[tokio::test]
async fn head_errors_have_no_body() {
    let env = env().await;
    for url in [
        env.object_url("missing.txt"),
        format!("{}/no-such-bucket/k", env.base()),
    ] {
        let a = env.send("HEAD", &url, &[], b"").await;
        assert_eq!(a.status, 404);
        assert!(a.body.is_empty());
        assert!(a.header("x-amz-request-id").is_some());
    }
    let a = env
        .send_as(
            Some("wrong"),
            "HEAD",
            &env.object_url("missing.txt"),
            &[],
            b"",
        )
        .await;
    assert_eq!((a.status, a.body.len()), (403, 0));
    env.stub.shutdown().await;
}

#[tokio::test]
async fn odd_ranges_and_empty_objects() {
    let env = env().await;
    let data: Vec<u8> = (0..100u8).collect();
    env.put("r.bin", &data).await;
    // Malformed or inverted ranges are ignored: the whole object, 200.
    for range in ["bytes=1-0", "bytes=abc", "items=0-1", "bytes=0-1,3-4"] {
        let a = env.get("r.bin", &[("range", range)]).await;
        assert_eq!(a.status, 200, "{range}");
        assert_eq!(a.body, data, "{range}");
        assert_eq!(a.header("content-range"), None, "{range}");
    }
    let a = env.get("r.bin", &[("range", "bytes=98-")]).await;
    assert_eq!(
        (a.status, a.header("content-range"), a.body.as_slice()),
        (206, Some("bytes 98-99/100"), &data[98..])
    );
    let a = env.get("r.bin", &[("range", "bytes=100-")]).await;
    a.assert_error(416, "InvalidRange");
    assert_eq!(a.header("content-range"), Some("bytes */100"));

    env.put("empty.bin", b"").await;
    let a = env.get("empty.bin", &[]).await;
    assert_eq!((a.status, a.body.len()), (200, 0));
    for range in ["bytes=0-0", "bytes=0-", "bytes=-1"] {
        let a = env.get("empty.bin", &[("range", range)]).await;
        a.assert_error(416, "InvalidRange");
        assert_eq!(a.header("content-range"), Some("bytes */0"), "{range}");
    }
    env.stub.shutdown().await;
}

#[tokio::test]
async fn if_none_match_answers_304_with_the_etag_and_no_body() {
    let env = env().await;
    let etag = env.put("c.txt", b"conditional").await;
    for method in ["GET", "HEAD"] {
        for tag in [etag.as_str(), "*", &format!("\"other\", {etag}")] {
            let a = env
                .send(
                    method,
                    &env.object_url("c.txt"),
                    &[("if-none-match", tag)],
                    b"",
                )
                .await;
            assert_eq!(a.status, 304, "{method} {tag}");
            assert_eq!(a.header("etag"), Some(etag.as_str()));
            assert!(a.body.is_empty());
        }
    }
    let a = env.get("c.txt", &[("if-none-match", "\"other\"")]).await;
    assert_eq!((a.status, a.body.as_slice()), (200, &b"conditional"[..]));
    let a = env.get("c.txt", &[("if-match", "\"other\"")]).await;
    a.assert_error(412, "PreconditionFailed");
    env.stub.shutdown().await;
}

#[tokio::test]
async fn oversized_headers_are_refused_before_anything_is_written() {
    let env = env().await;
    env.put("kept.txt", b"old").await;
    let filler = "f".repeat(9000);
    for key in ["kept.txt", "new.txt"] {
        let a = env
            .send(
                "PUT",
                &env.object_url(key),
                &[("x-filler", filler.as_str())],
                b"new",
            )
            .await;
        a.assert_error(400, "RequestHeaderSectionTooLarge");
    }
    assert_eq!(env.get("kept.txt", &[]).await.body, b"old");
    assert_eq!(env.keys().await, ["kept.txt"]);
    // Just under the limit is fine.
    let filler = "f".repeat(6000);
    let a = env
        .send(
            "PUT",
            &env.object_url("new.txt"),
            &[("x-filler", filler.as_str())],
            b"new",
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text());
    env.stub.shutdown().await;
}

#[tokio::test]
async fn anonymous_and_expired_requests_are_refused() {
    let env = env().await;
    env.put("p.txt", b"presigned").await;
    let anon = env
        .send_as(None, "GET", &env.object_url("p.txt"), &[], b"")
        .await;
    anon.assert_error(403, "AccessDenied");
    let anon_put = env
        .send_as(None, "PUT", &env.object_url("anon.txt"), &[], b"x")
        .await;
    anon_put.assert_error(403, "AccessDenied");
    assert_eq!(env.keys().await, ["p.txt"]);

    let url = env.object_url("p.txt");
    let now = SystemTime::now();
    let valid = presign_url(
        "GET",
        &url,
        &creds(SECRET_KEY),
        REGION,
        Duration::from_secs(300),
        now,
    )
    .unwrap();
    let a = env.send_as(None, "GET", &valid, &[], b"").await;
    assert_eq!((a.status, a.body.as_slice()), (200, &b"presigned"[..]));
    let expired = presign_url(
        "GET",
        &url,
        &creds(SECRET_KEY),
        REGION,
        Duration::from_secs(60),
        now - Duration::from_secs(3600),
    )
    .unwrap();
    env.send_as(None, "GET", &expired, &[], b"")
        .await
        .assert_error(403, "AccessDenied");
    // Stretching the expiry of a presigned URL breaks its signature.
    let stretched = valid.replace("X-Amz-Expires=300", "X-Amz-Expires=600");
    assert_ne!(stretched, valid);
    env.send_as(None, "GET", &stretched, &[], b"")
        .await
        .assert_error(403, "SignatureDoesNotMatch");
    // A presigned GET does not authorise a PUT.
    env.send_as(None, "PUT", &valid, &[], b"overwrite")
        .await
        .assert_error(403, "SignatureDoesNotMatch");
    assert_eq!(env.get("p.txt", &[]).await.body, b"presigned");
    env.stub.shutdown().await;
}

#[tokio::test]
async fn sigv2_presigned_urls_work_and_expire() {
    let env = env().await;
    env.put("v2/a b+c.txt", b"sigv2").await;
    env.put("v2/other.txt", b"other").await;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let presign = |key: &str, expires: u64| {
        let resource = format!("/{BUCKET}/{}", encode_path(key));
        let sts = sigv2::string_to_sign(
            "GET",
            &http::HeaderMap::new(),
            &resource,
            "",
            &expires.to_string(),
        );
        let signature = sigv2::sign(SECRET_KEY, &sts);
        format!(
            "{}{resource}?AWSAccessKeyId={ACCESS_KEY}&Expires={expires}&Signature={}",
            env.base(),
            encode_strict(&signature)
        )
    };
    let url = presign("v2/a b+c.txt", now + 300);
    let a = env.send_as(None, "GET", &url, &[], b"").await;
    assert_eq!(
        (a.status, a.body.as_slice()),
        (200, &b"sigv2"[..]),
        "{}",
        a.text()
    );
    // The signature covers the key: reused for another object, it fails.
    let moved = url.replace("v2/a%20b%2Bc.txt", "v2/other.txt");
    assert_ne!(moved, url);
    env.send_as(None, "GET", &moved, &[], b"")
        .await
        .assert_error(403, "SignatureDoesNotMatch");
    let expired = presign("v2/a b+c.txt", now - 10);
    env.send_as(None, "GET", &expired, &[], b"")
        .await
        .assert_error(403, "AccessDenied");
    env.stub.shutdown().await;
}

#[tokio::test]
async fn url_encoded_listings_echo_the_encoding_and_encode_keys() {
    let env = env().await;
    let keys = [
        "enc/a b.txt",
        "enc/a+b.txt",
        "enc/x&y<z>.txt",
        "enc/ümlaut.txt",
        "enc/dir one/inner.txt",
    ];
    for k in keys {
        env.put(k, k.as_bytes()).await;
    }
    let list = |query: &str| format!("{}/{BUCKET}?{query}", env.base());
    let a = env
        .send(
            "GET",
            &list("list-type=2&encoding-type=url&prefix=enc%2F"),
            &[],
            b"",
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.elements("EncodingType"), ["url"]);
    let listed = a.elements("Key");
    assert_eq!(listed.len(), keys.len());
    let mut decoded = Vec::new();
    for raw in &listed {
        assert!(
            raw.is_ascii() && !raw.contains([' ', '+', '&', '<']),
            "'{raw}' is URL-encoded"
        );
        // Strict percent-decoding and form decoding ('+' as space, as botocore does)
        // both give the key back.
        assert_eq!(decode(raw), decode_query_component(raw), "{raw}");
        decoded.push(decode(raw).into_owned());
    }
    let mut expected: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    expected.sort();
    assert_eq!(decoded, expected);

    let a = env
        .send(
            "GET",
            &list("list-type=2&encoding-type=url&prefix=enc%2F&delimiter=%2F"),
            &[],
            b"",
        )
        .await;
    let prefixes: Vec<String> = elements(&a.elements("CommonPrefixes").concat(), "Prefix");
    assert_eq!(prefixes.len(), 1, "{}", a.text());
    assert!(!prefixes[0].contains(' '));
    assert_eq!(decode(&prefixes[0]), "enc/dir one/");

    // Without encoding-type, keys are plain (XML-escaped) text and no EncodingType.
    let a = env
        .send("GET", &list("list-type=2&prefix=enc%2F"), &[], b"")
        .await;
    assert!(a.elements("EncodingType").is_empty());
    let plain: Vec<String> = a.elements("Key").iter().map(|k| xml_unescape(k)).collect();
    assert_eq!(plain, expected);
    env.stub.shutdown().await;
}

/// S3 stores any key, `..`, `.` and empty segments included; the stub keeps the keys a
/// file cannot have under their hash, inside its own folder, and nothing escapes the
/// bucket or overwrites another object.
#[tokio::test]
async fn keys_with_dot_and_empty_segments_are_stored_inside_the_stub_as_given() {
    let env = env().await;
    env.put("safe/b", b"kept").await;
    // Through a URL library: encoded slashes make `..` and empty segments in the key.
    let mut expected = vec!["safe/b".to_owned()];
    for (raw, key) in [
        ("safe%2F..%2Fb", "safe/../b"),
        ("a%2F%2Fb", "a//b"),
        ("%2E%2E%2Fescape", "../escape"),
        ("safe/a%2F.%2Fb", "safe/a/./b"),
    ] {
        let url = format!("{}/{BUCKET}/{raw}", env.base());
        let a = env.send("PUT", &url, &[], key.as_bytes()).await;
        assert_eq!(a.status, 200, "{raw}: {}", a.text());
        let got = env.send("GET", &url, &[], b"").await;
        assert_eq!(got.body, key.as_bytes(), "{raw}");
        expected.push(key.to_owned());
    }
    // Over a bare connection: literal dot segments and empty segments in the path.
    for (path, key) in [
        ("/raw/safe/../c", "safe/../c"),
        ("/raw/../raw/safe/b", "../raw/safe/b"),
        ("/raw/./x", "./x"),
        ("/raw/a//c", "a//c"),
        ("/raw//lead", "/lead"),
    ] {
        let (status, text) = env.raw("PUT", path, key.as_bytes()).await;
        assert_eq!(status, 200, "{path}: {text}");
        let (status, text) = env.raw("GET", path, b"").await;
        assert_eq!(status, 200, "{path}: {text}");
        assert!(text.ends_with(&format!("\r\n\r\n{key}")), "{path}: {text}");
        expected.push(key.to_owned());
    }
    expected.sort_unstable();
    assert_eq!(env.keys().await, expected);
    assert_eq!(env.get("safe/b", &[]).await.body, b"kept");
    let outside: Vec<_> = std::fs::read_dir(env.stub.data_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert_eq!(outside, [BUCKET], "nothing escaped the bucket folder");
    env.stub.shutdown().await;
}

#[tokio::test]
async fn content_md5_is_checked_before_anything_is_written() {
    let env = env().await;
    env.put("md5/kept.txt", b"old").await;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let wrong = b64(&md5::Md5::digest(b"not the body"));
    for key in ["md5/kept.txt", "md5/new.txt"] {
        let a = env
            .send(
                "PUT",
                &env.object_url(key),
                &[("content-md5", wrong.as_str())],
                b"new body",
            )
            .await;
        a.assert_error(400, "BadDigest");
        let a = env
            .send(
                "PUT",
                &env.object_url(key),
                &[("content-md5", "bm90LWFuLW1kNQ==")],
                b"new body",
            )
            .await;
        a.assert_error(400, "InvalidDigest");
    }
    assert_eq!(env.keys().await, ["md5/kept.txt"]);
    assert_eq!(env.get("md5/kept.txt", &[]).await.body, b"old");
    let right = b64(&md5::Md5::digest(b"new body"));
    let a = env
        .send(
            "PUT",
            &env.object_url("md5/new.txt"),
            &[("content-md5", right.as_str())],
            b"new body",
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(env.get("md5/new.txt", &[]).await.body, b"new body");
    env.stub.shutdown().await;
}

#[tokio::test]
async fn admin_faults_reject_bad_documents_and_keep_the_settings() {
    let env = env().await;
    let admin = format!("{}/admin/faults", env.stub.admin_url().unwrap());
    let http = &env.http;
    let current = || async {
        let r = http.get(&admin).send().await.unwrap();
        assert_eq!(r.status(), 200);
        serde_json::from_slice::<FaultConfig>(&r.bytes().await.unwrap()).unwrap()
    };
    let set = FaultConfig {
        latency_ms: 0,
        bandwidth_bytes_per_sec: Some(1 << 40),
        error_rate: 0.0,
        error_kinds: vec![FaultKind::Internal, FaultKind::Reset],
        throttle_rps: Some(1_000_000),
        fail_next: 0,
    };
    let r = http
        .put(&admin)
        .body(serde_json::to_string(&set).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(current().await, set);
    assert_eq!(env.stub.faults().get(), set);
    for bad in [
        "{not json",
        "",
        r#"{"error_rate": 2.0}"#,
        r#"{"eror_rate": 0.5}"#,
        r#"{"error_kinds": ["meteor"]}"#,
        r#"{"error_rate": 0.5, "error_kinds": []}"#,
        r#"{"bandwidth_bytes_per_sec": 0}"#,
        r#"{"throttle_rps": 0}"#,
    ] {
        let r = http.put(&admin).body(bad).send().await.unwrap();
        assert_eq!(r.status(), 400, "{bad}");
        let doc: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        assert!(doc["error"].is_string(), "{bad}: {doc}");
        assert_eq!(current().await, set, "{bad} changed the faults");
        assert_eq!(env.stub.faults().get(), set);
    }
    // Requests still succeed: the stored settings inject nothing.
    env.put("after.txt", b"ok").await;
    env.stub.shutdown().await;
}

/// The S3-like throttle: past its rate the stub answers 503 `SlowDown` in S3's own
/// error document, writes nothing, counts each refusal as a `throttled` fault, and
/// admits requests again once the rate allows.
#[tokio::test]
async fn past_its_throttle_rate_the_stub_answers_slowdown_and_then_recovers() {
    let env = env().await;
    env.put("hot.txt", b"hot").await;
    env.stub
        .faults()
        .set(FaultConfig {
            throttle_rps: Some(20),
            ..FaultConfig::default()
        })
        .unwrap();
    let mut ok = 0;
    let mut slowed = 0;
    for _ in 0..80 {
        let a = env.get("hot.txt", &[]).await;
        match a.status {
            200 => ok += 1,
            503 => {
                assert_eq!(a.elements("Code"), ["SlowDown"], "{}", a.text());
                slowed += 1;
            }
            other => panic!("status {other}: {}", a.text()),
        }
    }
    assert!(ok >= 20, "a second's worth is admitted at once: {ok}");
    assert!(slowed >= 1, "80 requests in a burst are over 20 a second");
    // A refused write writes nothing.
    let refused = loop {
        let a = env
            .send("PUT", &env.object_url("refused.txt"), &[], b"never")
            .await;
        if a.status == 503 {
            break a;
        }
    };
    assert_eq!(refused.elements("Code"), ["SlowDown"]);
    assert!(
        !env.stub
            .data_dir()
            .join(BUCKET)
            .join("refused.txt")
            .exists()
    );
    let metrics = env.stub.metrics().render();
    assert!(
        metrics.contains("talon_origin_faults_total{kind=\"throttled\"}"),
        "{metrics}"
    );
    // Once the rate allows, requests are admitted again (waited for, not slept).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while env.get("hot.txt", &[]).await.status != 200 {
        assert!(std::time::Instant::now() < deadline, "never admitted again");
        tokio::task::yield_now().await;
    }
    env.stub.shutdown().await;
}

#[tokio::test]
async fn an_empty_upload_that_expected_100_continue_ends_its_connection() {
    let env = env().await;
    // An empty PUT that asks for 100-continue: hyper never sends the 100 (there is no
    // body to read), so the client is left guessing whether to send one; the stub
    // closes the connection after answering instead of keeping it for reuse.
    let host = env.addr().to_string();
    let url = format!("http://{host}/{BUCKET}/empty.txt");
    let signed = sign_request(
        "PUT",
        &url,
        &[("host", host.as_str())],
        SignedBody::Bytes(b""),
        &creds(SECRET_KEY),
        REGION,
        SystemTime::now(),
    )
    .unwrap();
    let mut head = format!("PUT /{BUCKET}/empty.txt HTTP/1.1\r\nhost: {host}\r\n");
    for (k, v) in signed {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("content-length: 0\r\nexpect: 100-continue\r\n\r\n");
    let mut conn = tokio::net::TcpStream::connect(env.addr()).await.unwrap();
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut answer))
        .await
        .expect("the stub closes the connection after answering")
        .unwrap();
    let text = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(text.contains("connection: close"), "{text}");
    env.stub.shutdown().await;
}
