//! The `Cache-Status` response header (RFC 9211): how this gateway served an answer,
//! in the one vocabulary HTTP caches share, so an operator (or `curl -i`) sees a hit,
//! a fill or a fallback without reading metrics.
//!
//! The cache is named `talon`. What each outcome says:
//!
//! | outcome | header |
//! |---|---|
//! | every byte from a worker's cache (HEAD and listings from memory too) | `talon; hit` |
//! | a worker fetched bytes from the origin and kept them | `talon; fwd=miss; stored` |
//! | the cache failed and the origin answered | `talon; fwd=miss; detail=fallback` |
//! | sent to the origin by route, or a key that cannot be cached | `talon; fwd=bypass` |
//! | a write, a listing or another origin operation | `talon; fwd=request` |
//!
//! A read served from the last known version because the origin could not be reached
//! adds `; detail=stale`. An error answer has no header (its outcome is the error).

use http::HeaderValue;

use crate::metrics::Outcome;

/// The header's name.
pub const CACHE_STATUS: &str = "cache-status";

/// The header value for a request served with `outcome`; `stale` when the read was
/// answered from the last known version past its bound. `None` for a failure.
pub fn cache_status(outcome: Outcome, stale: bool) -> Option<HeaderValue> {
    let value = match (outcome, stale) {
        (Outcome::Hit, false) => "talon; hit",
        (Outcome::Hit, true) => "talon; hit; detail=stale",
        (Outcome::Fill, false) => "talon; fwd=miss; stored",
        (Outcome::Fill, true) => "talon; fwd=miss; stored; detail=stale",
        (Outcome::Fallback, _) => "talon; fwd=miss; detail=fallback",
        (Outcome::Bypass, _) => "talon; fwd=bypass",
        (Outcome::Origin, _) => "talon; fwd=request",
        (Outcome::Failed, _) => return None,
    };
    Some(HeaderValue::from_static(value))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Golden values: what operators' tooling parses must not drift.
    #[test]
    fn each_outcome_has_its_rfc_9211_form() {
        let cases = [
            (Outcome::Hit, false, Some("talon; hit")),
            (Outcome::Hit, true, Some("talon; hit; detail=stale")),
            (Outcome::Fill, false, Some("talon; fwd=miss; stored")),
            (
                Outcome::Fallback,
                false,
                Some("talon; fwd=miss; detail=fallback"),
            ),
            (Outcome::Bypass, false, Some("talon; fwd=bypass")),
            (Outcome::Origin, false, Some("talon; fwd=request")),
            (Outcome::Failed, false, None),
        ];
        for (outcome, stale, want) in cases {
            let got = cache_status(outcome, stale);
            assert_eq!(
                got.as_ref().map(|v| v.to_str().unwrap()),
                want,
                "{outcome:?}"
            );
        }
    }
}
