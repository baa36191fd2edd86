//! S3 request classification and every S3 signature format: classification, SigV4
//! (header and presigned) parsing and canonicalisation through verification with a fixed
//! key, SigV2 parsing and its string to sign. Nothing may panic.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use talon_fuzz::RawRequest;
use talon_protocols::s3::auth::{S3Identities, authenticate};
use talon_protocols::s3::request::{S3Addressing, S3Request};
use talon_protocols::s3::sigv4::{self, RequestParts};
use talon_protocols::s3::sigv2;

fuzz_target!(|data: &[u8]| {
    let req = RawRequest::from_bytes(data);
    let addressing = S3Addressing::VirtualHosted {
        domain: "s3.local".into(),
    };
    let parts = RequestParts {
        method: req.method.as_str(),
        raw_path: &req.path,
        raw_query: &req.query,
        headers: &req.headers,
    };
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    if let Ok(Some(auth)) = sigv4::parse_authorization(&req.headers, &req.query) {
        let _ = sigv4::verify(&parts, &auth, "secret", now);
    }
    let _ = sigv2::parse_authorization(&req.headers, &req.query);
    let _ = sigv2::string_to_sign(req.method.as_str(), &req.headers, &req.path, &req.query, "1");
    if let Ok(classified) =
        S3Request::classify(&req.method, &addressing, &req.headers, &req.path, &req.query)
    {
        let identities = S3Identities {
            anonymous: talon_protocols::access::AnonymousAccess::ReadOnly,
            regions: vec!["us-east-1".into()],
            ..S3Identities::default()
        }
        .with_unrestricted_key("AK", "secret");
        let _ = authenticate(&identities, None, &classified, &parts, now);
    }
});
