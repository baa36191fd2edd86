//! `Expect: 100-continue` hygiene for servers that speak to S3 and Azure SDKs.
//!
//! hyper sends `100 Continue` only when a handler reads the body. A request that said
//! `Expect: 100-continue` but whose body is never read (a zero-length upload, or one
//! refused before its body is read) is answered without one, and the client cannot tell
//! whether it still owes the body: botocore then misreads the next response on that
//! connection. Such connections must be closed after the answer (`Connection: close`).

use http::{HeaderMap, HeaderValue, StatusCode};

/// Whether a `100 Continue` may go unsent for a request, and on which answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContinueRisk {
    /// No `Expect: 100-continue`.
    None,
    /// Expected, with a body that a successful answer has read.
    OnError,
    /// Expected, with an empty body: never read.
    Always,
}

impl ContinueRisk {
    /// The risk of a request, from its headers.
    pub fn of(headers: &HeaderMap) -> ContinueRisk {
        let text = |name| {
            headers
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
        };
        let expects =
            text(http::header::EXPECT).is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
        let empty =
            text(http::header::CONTENT_LENGTH).is_some_and(|v| v.trim().parse() == Ok(0u64));
        match (expects, empty) {
            (false, _) => ContinueRisk::None,
            (true, true) => ContinueRisk::Always,
            (true, false) => ContinueRisk::OnError,
        }
    }

    /// Whether an answer with `status` must close the connection.
    pub fn must_close(self, status: StatusCode) -> bool {
        match self {
            ContinueRisk::None => false,
            ContinueRisk::Always => true,
            ContinueRisk::OnError => !status.is_success(),
        }
    }

    /// Adds `Connection: close` to an answer's headers when [`must_close`](Self::must_close)
    /// says so.
    pub fn apply(self, status: StatusCode, headers: &mut HeaderMap) {
        if self.must_close(status) {
            headers.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn closes_only_where_a_body_may_be_owed() {
        let plain = ContinueRisk::of(&headers(&[("content-length", "10")]));
        let upload = ContinueRisk::of(&headers(&[
            ("expect", "100-Continue"),
            ("content-length", "10"),
        ]));
        let empty = ContinueRisk::of(&headers(&[
            ("expect", "100-continue"),
            ("content-length", "00"),
        ]));
        assert_eq!(
            (plain, upload, empty),
            (
                ContinueRisk::None,
                ContinueRisk::OnError,
                ContinueRisk::Always
            )
        );
        assert!(!plain.must_close(StatusCode::FORBIDDEN));
        assert!(!upload.must_close(StatusCode::OK));
        assert!(upload.must_close(StatusCode::FORBIDDEN));
        assert!(empty.must_close(StatusCode::OK));
        let mut h = HeaderMap::new();
        empty.apply(StatusCode::OK, &mut h);
        assert_eq!(h["connection"], "close");
    }
}
