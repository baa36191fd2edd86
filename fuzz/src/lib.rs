//! Helpers the fuzz targets share: turning fuzzer bytes into an HTTP request's parts.
//!
//! The input is read as lines: the method, the raw path, the raw query, then
//! `name: value` headers. Invalid header names or values are skipped, as an HTTP
//! server's parser would have refused them before Talon saw them.

use http::{HeaderMap, HeaderName, HeaderValue, Method};

/// A request as the fronts see it after HTTP parsing.
pub struct RawRequest {
    /// The method.
    pub method: Method,
    /// The raw path, as received.
    pub path: String,
    /// The raw query, as received.
    pub query: String,
    /// The headers.
    pub headers: HeaderMap,
}

impl RawRequest {
    /// Reads fuzzer bytes as a request (see the module docs).
    pub fn from_bytes(data: &[u8]) -> RawRequest {
        let text = String::from_utf8_lossy(data);
        let mut lines = text.split('\n');
        let method = match lines.next().unwrap_or("").trim() {
            "PUT" => Method::PUT,
            "POST" => Method::POST,
            "DELETE" => Method::DELETE,
            "HEAD" => Method::HEAD,
            "PATCH" => Method::PATCH,
            _ => Method::GET,
        };
        let path = lines.next().unwrap_or("/").to_owned();
        let query = lines.next().unwrap_or("").to_owned();
        let mut headers = HeaderMap::new();
        for line in lines {
            if let Some((name, value)) = line.split_once(':')
                && let (Ok(n), Ok(v)) = (
                    HeaderName::from_bytes(name.trim().as_bytes()),
                    HeaderValue::from_str(value.trim()),
                )
            {
                headers.append(n, v);
            }
        }
        RawRequest {
            method,
            path,
            query,
            headers,
        }
    }
}
