//! Range, Content-Range and conditional-header parsing: never a panic, and a resolved
//! range always lies inside the object.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use talon_fuzz::RawRequest;
use talon_protocols::conditional::{Conditions, EtagList};
use talon_protocols::range::{RangeSpec, parse_content_range};

fuzz_target!(|data: &[u8]| {
    let Some((&size, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let size = u64::from(size) * 1000;
    if let Some(spec) = RangeSpec::parse(&text)
        && let Ok(r) = spec.resolve(size)
    {
        assert!(r.start < r.end && r.end <= size, "{r:?} outside {size}");
    }
    if let Some((r, total)) = parse_content_range(&text) {
        assert!(r.start < r.end);
        if let Some(t) = total {
            assert!(r.end <= t);
        }
    }
    let _ = EtagList::parse(&text).matches("\"abc\"");
    let req = RawRequest::from_bytes(rest);
    let conditions = Conditions::from_headers(&req.headers);
    let when = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let _ = conditions.check_read("\"abc\"", when);
    let _ = conditions.check_write(Some(("\"abc\"", when)));
    let _ = conditions.check_write(None);
});
