//! Driving an HTTP/1.1 server with the same workload, for comparison (nginx
//! serving the same bytes from a file, an origin, the gateway).
//!
//! Each connection is a keep-alive HTTP/1.1 connection made with hyper's
//! connection-level client, so there are exactly `--conns` TCP connections
//! and each carries one request at a time (HTTP/1.1 pipelining is not used:
//! servers and proxies support it poorly, and real clients do not use it).
//! Each request is a `GET` with `Range: bytes=a-b`; a reply counts only if
//! it is `206 Partial Content` with the matching `Content-Range` and exactly
//! the requested number of body bytes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_RANGE, HOST, RANGE};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::error::{LoadError, Result};
use crate::schedule::Pacer;
use crate::stats::{Recorder, Samples, Timing};

/// Most bytes of an unexpected response body quoted in an error.
const QUOTE_LIMIT: usize = 512;

/// A parsed `http://` URL.
#[derive(Debug, Clone)]
pub struct HttpTarget {
    /// `host:port` to connect to.
    pub connect: String,
    /// The `Host` header.
    pub authority: String,
    /// Path and query sent in the request line.
    pub path: String,
}

impl HttpTarget {
    /// Parses `http://host[:port]/path`. Errors with [`LoadError::Config`]
    /// for another scheme, a missing host or user information.
    pub fn parse(url: &str) -> Result<Self> {
        let bad = |why: &str| LoadError::Config(format!("--http '{url}': {why}"));
        let uri: Uri = url.parse().map_err(|e| bad(&format!("not a URL ({e})")))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(bad(&format!(
                    "scheme '{other}' is not supported, only http"
                )));
            }
            None => return Err(bad("give the whole URL, starting with http://")),
        }
        let authority = uri.authority().ok_or_else(|| bad("no host"))?;
        if authority.as_str().contains('@') {
            return Err(bad("user information in the URL is not supported"));
        }
        let connect = match authority.port_u16() {
            Some(_) => authority.as_str().to_owned(),
            None => format!("{}:80", authority.as_str()),
        };
        let path = uri
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
        Ok(Self {
            connect,
            authority: authority.as_str().to_owned(),
            path,
        })
    }

    fn request(&self, method: Method, range: Option<(u64, u64)>) -> Result<Request<Empty<Bytes>>> {
        let mut b = Request::builder()
            .method(method)
            .uri(self.path.as_str())
            .header(HOST, self.authority.as_str());
        if let Some((first, last)) = range {
            b = b.header(RANGE, format!("bytes={first}-{last}"));
        }
        b.body(Empty::new()).map_err(|e| {
            LoadError::Config(format!("cannot build a request for {}: {e}", self.path))
        })
    }
}

/// An HTTP/1.1 connection: the handle requests are sent on. Its driver
/// runs as a task.
pub(crate) async fn handshake(
    target: &HttpTarget,
    stream: TcpStream,
) -> Result<SendRequest<Empty<Bytes>>> {
    let (sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| LoadError::Server(format!("HTTP handshake with {}: {e}", target.connect)))?;
    tokio::spawn(async move {
        // Its failure surfaces as an error on the next request.
        let _ = conn.await;
    });
    Ok(sender)
}

async fn quote_body(body: hyper::body::Incoming) -> String {
    let mut out = Vec::new();
    let mut body = body;
    while out.len() < QUOTE_LIMIT {
        match body.frame().await {
            Some(Ok(f)) => {
                if let Some(d) = f.data_ref() {
                    out.extend_from_slice(d);
                }
            }
            _ => break,
        }
    }
    out.truncate(QUOTE_LIMIT);
    String::from_utf8_lossy(&out).trim().to_owned()
}

/// Sends a `HEAD` and returns the `Content-Length`: the object's size.
pub(crate) async fn head_size(target: &HttpTarget, timeout: Duration) -> Result<u64> {
    let stream = crate::wire::connect(&target.connect, timeout).await?;
    let mut sender = handshake(target, stream).await?;
    let req = target.request(Method::HEAD, None)?;
    let resp = tokio::time::timeout(Duration::from_secs(30), sender.send_request(req))
        .await
        .map_err(|_| LoadError::Server(format!("HEAD {}: no answer in 30 s", target.path)))?
        .map_err(|e| LoadError::Server(format!("HEAD {}: {e}", target.path)))?;
    if resp.status() != StatusCode::OK {
        return Err(LoadError::Server(format!(
            "HEAD {} answered {}",
            target.path,
            resp.status()
        )));
    }
    resp.headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| LoadError::Server(format!("HEAD {} has no Content-Length", target.path)))
}

/// Reads bytes `0..len` once (prefetch: the server's page cache).
pub(crate) async fn prefetch(target: &HttpTarget, len: u64, timeout: Duration) -> Result<()> {
    let stream = crate::wire::connect(&target.connect, timeout).await?;
    let mut sender = handshake(target, stream).await?;
    let req = target.request(Method::GET, Some((0, len - 1)))?;
    let what = format!("prefetching bytes 0-{} of {}", len - 1, target.path);
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| LoadError::Server(format!("{what}: {e}")))?;
    if resp.status() != StatusCode::PARTIAL_CONTENT {
        let status = resp.status();
        let body = quote_body(resp.into_body()).await;
        return Err(LoadError::Server(format!("{what}: HTTP {status}: {body}")));
    }
    let mut body = resp.into_body();
    let mut got = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| LoadError::Server(format!("{what}: {e}")))?;
        if let Some(d) = frame.data_ref() {
            got += d.len() as u64;
        }
    }
    if got != len {
        return Err(LoadError::Server(format!("{what}: got {got} bytes")));
    }
    Ok(())
}

/// What the connections of an HTTP run share.
pub(crate) struct HttpCtx {
    pub(crate) target: HttpTarget,
    pub(crate) object_size: u64,
    pub(crate) block_size: u64,
    pub(crate) blocks: u64,
    pub(crate) range_size: u32,
    pub(crate) align: u64,
    pub(crate) seed: u64,
    pub(crate) recorder: Arc<Recorder>,
}

/// Runs one connection: one request at a time until the pacer stops.
pub(crate) async fn run_connection(
    ctx: Arc<HttpCtx>,
    mut sender: SendRequest<Empty<Bytes>>,
    mut pacer: Pacer,
    conn: usize,
) {
    let mut rng = fastrand::Rng::with_seed(ctx.seed.wrapping_add(conn as u64));
    let mut local = Samples::default();
    let times = *pacer.times();
    let len = u64::from(ctx.range_size);
    let mut previous_done = times.start;
    let outcome: std::result::Result<(), String> = loop {
        let Ok(due) = pacer.wait_due().await else {
            break Ok(());
        };
        // Pick the range.
        let block = rng.u64(0..ctx.blocks);
        let block_start = block * ctx.block_size;
        let block_len = ctx.block_size.min(ctx.object_size - block_start);
        let slots = (block_len - len) / ctx.align;
        let first = block_start + rng.u64(0..=slots) * ctx.align;
        let last = first + len - 1;
        // Wait for the connection to be free (it is: one request at a time).
        match tokio::time::timeout_at(pacer.slot_deadline(), sender.ready()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => break Err(format!("{} closed the connection: {e}", ctx.target.connect)),
            Err(_) => break Ok(()),
        }
        let req = match ctx.target.request(Method::GET, Some((first, last))) {
            Ok(r) => r,
            Err(e) => break Err(e.to_string()),
        };
        let sent = Instant::now();
        let intended = due.unwrap_or(sent);
        let ready = intended.max(previous_done).min(sent);
        pacer.sent();
        let exchange = async {
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| format!("GET {} bytes={first}-{last}: {e}", ctx.target.path))?;
            let status = resp.status();
            if status != StatusCode::PARTIAL_CONTENT {
                let body = quote_body(resp.into_body()).await;
                return Err(format!(
                    "GET {} bytes={first}-{last}: HTTP {status} (206 expected): {body}",
                    ctx.target.path
                ));
            }
            let want = format!("bytes {first}-{last}/{}", ctx.object_size);
            let got_range = resp
                .headers()
                .get(CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if got_range != want {
                return Err(format!(
                    "GET {} bytes={first}-{last}: Content-Range '{got_range}', expected '{want}'",
                    ctx.target.path
                ));
            }
            let mut body = resp.into_body();
            let mut got = 0u64;
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| {
                    format!("GET {} bytes={first}-{last}: body: {e}", ctx.target.path)
                })?;
                if let Some(d) = frame.data_ref() {
                    got += d.len() as u64;
                }
            }
            if got != len {
                return Err(format!(
                    "GET {} bytes={first}-{last}: {got} body bytes, {len} expected",
                    ctx.target.path
                ));
            }
            Ok(got)
        };
        match tokio::time::timeout_at(times.drain_deadline, exchange).await {
            Ok(Ok(got)) => {
                let done = Instant::now();
                let timing = Timing {
                    intended,
                    ready,
                    sent,
                    done,
                };
                ctx.recorder
                    .completed(&mut local, timing, got, (times.warm_end, times.end));
                previous_done = done;
            }
            Ok(Err(e)) => break Err(e),
            Err(_) => {
                break Err(format!(
                    "GET {} bytes={first}-{last}: no complete reply by the drain deadline",
                    ctx.target.path
                ));
            }
        }
    };
    ctx.recorder.flush(&mut local);
    if let Err(message) = outcome {
        ctx.recorder.error(1, || message);
    }
    let unsent = pacer.unsent();
    ctx.recorder.error(unsent, || {
        format!(
            "{unsent} request(s) due before the end of the window were never sent: the \
             connection was busy until the drain deadline or failed"
        )
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = HttpTarget::parse("http://127.0.0.1:8080/bench/block.bin?x=1")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.connect, "127.0.0.1:8080");
        assert_eq!(t.authority, "127.0.0.1:8080");
        assert_eq!(t.path, "/bench/block.bin?x=1");
        let t = HttpTarget::parse("http://localhost/f").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.connect, "localhost:80");
        for bad in ["https://x/f", "127.0.0.1:80/f", "http://u:p@x/f", "::"] {
            assert!(HttpTarget::parse(bad).is_err(), "{bad}");
        }
    }
}
