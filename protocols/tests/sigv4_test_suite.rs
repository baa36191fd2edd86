//! Checks the SigV4 verifier against AWS's published signing test suite
//! (`tests/vectors/sigv4`): every applicable vector's canonical request must equal ours
//! byte for byte, and its signed requests (header and presigned forms) must verify —
//! and fail when the secret is wrong.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use http::HeaderMap;
use sha2::{Digest, Sha256};
use talon_protocols::ErrorKind;
use talon_protocols::s3::sigv4::{
    PathMode, RequestParts, canonical_request, parse_authorization, verify_with_payload_hash,
};

/// Vectors whose request cannot be expressed in S3's rules: obsolete line folding in a
/// header value, and paths that only match after the URI normalisation S3 never does.
const NOT_APPLICABLE: &[&str] = &[
    "get-header-value-multiline",
    "get-relative-normalized",
    "get-relative-relative-normalized",
    "get-slash-dot-slash-normalized",
    "get-slash-normalized",
    "get-slash-pointless-dot-normalized",
    "get-slashes-normalized",
];

struct RawRequest {
    method: String,
    path: String,
    query: String,
    headers: HeaderMap,
    body: Vec<u8>,
}

fn parse_request(text: &str) -> RawRequest {
    let (head, body) = text.split_once("\n\n").unwrap_or((text, ""));
    let mut lines = head.lines();
    let request_line = lines.next().unwrap();
    let method = request_line.split(' ').next().unwrap().to_owned();
    let target = &request_line[method.len() + 1..request_line.rfind(" HTTP/1.1").unwrap()];
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut headers = HeaderMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').unwrap();
        headers.append(
            http::HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()).unwrap(),
            http::HeaderValue::from_bytes(value.as_bytes()).unwrap(),
        );
    }
    RawRequest {
        method,
        path: path.to_owned(),
        query: query.to_owned(),
        headers,
        body: body.as_bytes().to_vec(),
    }
}

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/sigv4")
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap()
}

#[test]
fn published_sigv4_vectors_verify() {
    let mut checked = 0;
    let mut entries: Vec<_> = std::fs::read_dir(suite_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for dir in entries {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if !dir.join("context.json").exists() || NOT_APPLICABLE.contains(&name.as_str()) {
            continue;
        }
        let context: serde_json::Value = serde_json::from_str(&read(&dir, "context.json")).unwrap();
        let secret = context["credentials"]["secret_access_key"]
            .as_str()
            .unwrap();
        let timestamp = context["timestamp"].as_str().unwrap();
        let now: SystemTime =
            time::OffsetDateTime::parse(timestamp, &time::format_description::well_known::Rfc3339)
                .unwrap()
                .into();
        let omit_token = context["omit_session_token"].as_bool() == Some(true);

        for form in ["header", "query"] {
            if form == "query" && omit_token {
                // The token is added after signing, which presigned S3 URLs do not allow.
                continue;
            }
            let signed = parse_request(&read(&dir, &format!("{form}-signed-request.txt")));
            let payload_hash = hex::encode(Sha256::digest(&signed.body));
            let parts = RequestParts {
                method: &signed.method,
                raw_path: &signed.path,
                raw_query: &signed.query,
                headers: &signed.headers,
            };
            let auth = parse_authorization(&signed.headers, &signed.query)
                .unwrap_or_else(|e| panic!("{name}/{form}: {e}"))
                .unwrap_or_else(|| panic!("{name}/{form}: no authorization found"));
            let ours = canonical_request(
                &parts,
                &auth.signed_headers,
                &payload_hash,
                PathMode::Reencoded,
            )
            .unwrap();
            let theirs = read(&dir, &format!("{form}-canonical-request.txt"));
            assert_eq!(ours, theirs, "{name}/{form}: canonical request differs");
            verify_with_payload_hash(&parts, &auth, secret, &payload_hash, now)
                .unwrap_or_else(|e| panic!("{name}/{form}: {e}"));
            let wrong =
                verify_with_payload_hash(&parts, &auth, "not-the-secret", &payload_hash, now);
            assert_eq!(
                wrong.map(|_| ()).map_err(|e| e.kind()),
                Err(ErrorKind::SignatureDoesNotMatch)
            );
            checked += 1;
        }
    }
    assert!(checked >= 60, "only {checked} vectors were checked");
}
