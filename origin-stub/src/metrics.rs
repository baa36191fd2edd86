//! The stub's counters, rendered in the Prometheus text format on `/metrics`, so a test
//! can prove what reached the origin (for instance that a cache hit made no GET).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use talon_core::Backend;

/// Counters of requests, bytes and injected faults.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    faults: Mutex<BTreeMap<&'static str, u64>>,
    get_bytes_s3: AtomicU64,
    get_bytes_azure: AtomicU64,
    put_bytes_s3: AtomicU64,
    put_bytes_azure: AtomicU64,
}

impl Metrics {
    /// Counts one request of `operation`.
    pub fn request(&self, protocol: Backend, operation: &'static str) {
        *self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((protocol.name(), operation))
            .or_default() += 1;
    }

    /// Counts an injected fault.
    pub fn fault(&self, kind: &'static str) {
        *self
            .faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(kind)
            .or_default() += 1;
    }

    /// Counts body bytes sent by GET answers.
    pub fn get_bytes(&self, protocol: Backend, n: u64) {
        match protocol {
            Backend::S3 => &self.get_bytes_s3,
            Backend::Azure => &self.get_bytes_azure,
        }
        .fetch_add(n, Ordering::Relaxed);
    }

    /// Counts body bytes received by writes.
    pub fn put_bytes(&self, protocol: Backend, n: u64) {
        match protocol {
            Backend::S3 => &self.put_bytes_s3,
            Backend::Azure => &self.put_bytes_azure,
        }
        .fetch_add(n, Ordering::Relaxed);
    }

    /// The count of one (protocol, operation), for in-process tests.
    pub fn requests_of(&self, protocol: Backend, operation: &str) -> u64 {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|((p, o), _)| *p == protocol.name() && *o == operation)
            .map(|(_, n)| *n)
            .sum()
    }

    /// Injected faults of `kind` so far (`throttled`, `slowdown`, `truncate`, ...).
    pub fn faults_of(&self, kind: &str) -> u64 {
        self.faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(kind)
            .copied()
            .unwrap_or(0)
    }

    /// Every request counted so far, of any protocol and operation: what a test reads
    /// before and after something that must not reach the origin.
    pub fn requests_total(&self) -> u64 {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .sum()
    }

    /// Renders every counter in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP talon_origin_requests_total Requests received, by protocol and operation.\n",
        );
        out.push_str("# TYPE talon_origin_requests_total counter\n");
        for ((p, o), n) in self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "talon_origin_requests_total{{protocol=\"{p}\",operation=\"{o}\"}} {n}"
            );
        }
        out.push_str("# HELP talon_origin_get_bytes_total Body bytes sent by GET answers.\n");
        out.push_str("# TYPE talon_origin_get_bytes_total counter\n");
        let _ = writeln!(
            out,
            "talon_origin_get_bytes_total{{protocol=\"s3\"}} {}",
            self.get_bytes_s3.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "talon_origin_get_bytes_total{{protocol=\"azure\"}} {}",
            self.get_bytes_azure.load(Ordering::Relaxed)
        );
        out.push_str("# HELP talon_origin_put_bytes_total Body bytes received by writes.\n");
        out.push_str("# TYPE talon_origin_put_bytes_total counter\n");
        let _ = writeln!(
            out,
            "talon_origin_put_bytes_total{{protocol=\"s3\"}} {}",
            self.put_bytes_s3.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "talon_origin_put_bytes_total{{protocol=\"azure\"}} {}",
            self.put_bytes_azure.load(Ordering::Relaxed)
        );
        out.push_str("# HELP talon_origin_faults_total Faults injected, by kind.\n");
        out.push_str("# TYPE talon_origin_faults_total counter\n");
        for (k, n) in self.faults.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(out, "talon_origin_faults_total{{kind=\"{k}\"}} {n}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters() {
        let m = Metrics::default();
        m.request(Backend::S3, "GetObject");
        m.request(Backend::S3, "GetObject");
        m.request(Backend::Azure, "GetBlob");
        m.get_bytes(Backend::S3, 10);
        m.fault("reset");
        let text = m.render();
        assert!(
            text.contains(
                "talon_origin_requests_total{protocol=\"s3\",operation=\"GetObject\"} 2\n"
            )
        );
        assert!(
            text.contains(
                "talon_origin_requests_total{protocol=\"azure\",operation=\"GetBlob\"} 1\n"
            )
        );
        assert!(text.contains("talon_origin_get_bytes_total{protocol=\"s3\"} 10\n"));
        assert!(text.contains("talon_origin_faults_total{kind=\"reset\"} 1\n"));
        assert_eq!(m.requests_of(Backend::S3, "GetObject"), 2);
    }
}
