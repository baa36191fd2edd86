//! Azure request classification, Shared Key canonicalisation and verification, and SAS
//! parsing and verification with a fixed key. Nothing may panic.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use talon_fuzz::RawRequest;
use talon_protocols::azure::auth::{AzureIdentity, Transport, authenticate};
use talon_protocols::azure::request::{AzureAddressing, AzureRequest};
use talon_protocols::azure::shared_key::{self, AccountKey, SharedKeyParts};

fuzz_target!(|data: &[u8]| {
    let req = RawRequest::from_bytes(data);
    let parts = SharedKeyParts {
        method: req.method.as_str(),
        raw_path: &req.path,
        raw_query: &req.query,
        headers: &req.headers,
    };
    let _ = shared_key::string_to_sign(&parts, "devstoreaccount1");
    let _ = shared_key::parse_authorization(&req.headers);
    let addressing = AzureAddressing::HostStyle {
        domain: "blob.local".into(),
    };
    let Ok(classified) =
        AzureRequest::classify(&req.method, &addressing, &req.headers, &req.path, &req.query)
    else {
        return;
    };
    let Ok(key) = AccountKey::from_base64("a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5") else {
        return;
    };
    let identity = AzureIdentity::unrestricted(
        "devstoreaccount1",
        Some(key),
        talon_protocols::access::AnonymousAccess::ReadOnly,
    );
    let transport = Transport {
        https: false,
        client_ip: Some([127, 0, 0, 1].into()),
    };
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let _ = authenticate(&identity, None, &classified, &parts, transport, now);
});
