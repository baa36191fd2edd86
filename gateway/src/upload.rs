//! Client uploads on their way to the origin: decoded, verified, and streamed.
//!
//! An upload is read from the client as a stream and relayed to the origin as a stream
//! of known length, so a large object never sits in the gateway's memory. Everything the
//! client claims about the body is checked on the way: `aws-chunked` framing with its
//! chunk and trailer signatures, `x-amz-content-sha256`, `Content-MD5`, flexible
//! checksums.
//!
//! The origin is told the decoded length up front, so it commits the object the moment
//! that many bytes have arrived. Hence two invariants, which together mean a tampered,
//! longer, shorter or cut-off body changes nothing at the origin:
//! - never more than the announced length leaves: a body that decodes to more is
//!   refused at the first byte too many;
//! - the byte that completes the announced length leaves only after every check has
//!   passed (the last piece is held back; while anything is held, what was released is
//!   strictly shorter than the announced length).
//!
//! If a check fails the stream ends with an error, the origin receives fewer bytes than
//! announced and stores nothing, and the client gets the protocol's error.
//! [`settle`] turns the two results (the client's checks, the origin's answer) into one,
//! and treats an origin success without a finished verification as an error.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use hyper::body::Body as _;
use talon_protocols::checksum::ChecksumAlgorithm;
pub use talon_protocols::upload::UploadClaims;
use talon_protocols::upload::UploadVerifier;
use talon_protocols::{Error, ErrorKind};

/// What a verified upload turned out to be, read once the stream has ended.
#[derive(Debug, Default, Clone)]
pub struct Verified {
    /// Decoded bytes.
    pub len: u64,
    /// MD5 of the decoded bytes, hex.
    pub md5_hex: String,
    /// The verified flexible checksum, from a header or trailer.
    pub checksum: Option<(ChecksumAlgorithm, String)>,
    /// The decoded bytes themselves, for an upload no longer than the stream was told
    /// to keep ([`VerifyingBody::keep_up_to`]): what the cache is filled with after the
    /// origin has stored them (write-through, read-your-writes).
    pub kept: Option<Bytes>,
}

/// The shared outcome of a verifying stream: set when the stream ends.
pub type Outcome = Arc<Mutex<Option<Result<Verified, Error>>>>;

/// Decodes and verifies a client body while yielding its decoded bytes.
pub struct VerifyingBody {
    body: axum::body::Body,
    /// Taken when the body ends.
    verifier: Option<UploadVerifier>,
    announced: u64,
    idle: std::time::Duration,
    idle_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    held: Option<Bytes>,
    done: bool,
    outcome: Outcome,
    kept: Option<Vec<u8>>,
}

impl VerifyingBody {
    /// Wraps a client body whose decoded length was announced to the origin as
    /// `announced` bytes: a body that decodes to more or fewer bytes fails, and so does
    /// one that sends nothing for `idle`.
    pub fn new(
        body: axum::body::Body,
        claims: UploadClaims,
        announced: u64,
        idle: std::time::Duration,
    ) -> (VerifyingBody, Outcome) {
        let outcome: Outcome = Arc::new(Mutex::new(None));
        let v = VerifyingBody {
            body,
            // The origin is told `announced`: the body is held to exactly that.
            verifier: Some(UploadVerifier::new(claims, Some(announced), u64::MAX)),
            announced,
            idle,
            idle_timer: None,
            held: None,
            done: false,
            outcome: outcome.clone(),
            kept: None,
        };
        (v, outcome)
    }

    /// Also keeps a copy of the decoded bytes, for [`Verified::kept`], when the
    /// announced length is at most `max` bytes (0 keeps nothing). The copy is bounded
    /// by the announced length, which the stream never exceeds.
    pub fn keep_up_to(mut self, max: u64) -> VerifyingBody {
        if max > 0 && self.announced <= max {
            self.kept = Some(Vec::with_capacity(self.announced as usize));
        }
        self
    }

    fn fail(&mut self, e: Error) -> Poll<Option<Result<Bytes, std::io::Error>>> {
        self.done = true;
        let message = e.message().to_owned();
        *self.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(Err(e));
        Poll::Ready(Some(Err(std::io::Error::other(message))))
    }

    /// Every check after the last byte; the held-back piece is released only if they pass.
    fn finish(&mut self) -> Result<Verified, Error> {
        let verifier = self
            .verifier
            .take()
            .ok_or_else(|| Error::new(ErrorKind::InternalError, "the upload was verified twice"))?;
        let upload = verifier.finish()?;
        Ok(Verified {
            len: upload.len,
            md5_hex: upload.md5_hex(),
            checksum: upload.checksum,
            kept: self.kept.take().map(Bytes::from),
        })
    }

    fn absorb(&mut self, data: Bytes) -> Result<Bytes, Error> {
        let verifier = self.verifier.as_mut().ok_or_else(|| {
            Error::new(
                ErrorKind::InternalError,
                "the upload went on after it ended",
            )
        })?;
        let decoded = verifier.absorb(data)?;
        if let Some(kept) = &mut self.kept {
            kept.extend_from_slice(&decoded);
        }
        Ok(decoded)
    }
}

impl Stream for VerifyingBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Pending => {
                    let idle = this.idle;
                    let timer = this
                        .idle_timer
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                    if timer.as_mut().poll(cx).is_ready() {
                        return this.fail(Error::new(
                            ErrorKind::Timeout,
                            "Your socket connection to the server was not read from or written to within the timeout period.",
                        ));
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Some(Err(e))) => {
                    return this.fail(Error::new(
                        ErrorKind::IncompleteBody,
                        format!("the request body broke off: {e}"),
                    ));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    this.idle_timer = None;
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    let decoded = match this.absorb(data) {
                        Ok(d) => d,
                        Err(e) => return this.fail(e),
                    };
                    if decoded.is_empty() {
                        continue;
                    }
                    // Release the previous piece, hold this one back.
                    if let Some(prev) = this.held.replace(decoded) {
                        return Poll::Ready(Some(Ok(prev)));
                    }
                }
                Poll::Ready(None) => {
                    return match this.finish() {
                        Ok(v) => {
                            this.done = true;
                            *this.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(Ok(v));
                            Poll::Ready(this.held.take().map(Ok))
                        }
                        Err(e) => this.fail(e),
                    };
                }
            }
        }
    }
}

/// The body to send the origin for a verifying stream.
///
/// An HTTP client never polls the body of a request whose Content-Length is 0, so for
/// an announced length of 0 the stream is read to its end here first (its framing,
/// trailer and digests still have to verify) and the origin gets an empty body only if
/// it did.
///
/// # Errors
/// The failed check of an empty upload; the origin is then never contacted.
pub async fn origin_body(mut stream: VerifyingBody) -> Result<reqwest::Body, Error> {
    if stream.announced > 0 {
        return Ok(reqwest::Body::wrap_stream(stream));
    }
    while let Some(item) = futures_util::StreamExt::next(&mut stream).await {
        if item.is_err() {
            break;
        }
    }
    let mut outcome = stream.outcome.lock().unwrap_or_else(|p| p.into_inner());
    match outcome.take() {
        Some(Err(e)) => Err(e),
        other => {
            *outcome = other;
            Ok(reqwest::Body::from(Bytes::new()))
        }
    }
}

/// The outcome of a verifying stream once the origin call has returned.
fn take_outcome(outcome: &Outcome) -> Option<Result<Verified, Error>> {
    outcome.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// An upload's one result, from the client's checks and the origin's answer.
///
/// The client's checks decide first: a tampered body is the client's error even though
/// the origin saw it as a broken upload. An origin that failed before the body ended
/// gives its own error. An origin that *succeeded* although the verification never
/// finished would have committed unverified bytes; the invariants above rule that out,
/// and should it happen anyway it is an error, never a success.
///
/// # Errors
/// The failed check, the origin's error, or [`ErrorKind::InternalError`].
pub fn settle<T>(outcome: &Outcome, origin: Result<T, Error>) -> Result<(T, Verified), Error> {
    match take_outcome(outcome) {
        Some(Err(e)) => Err(e),
        Some(Ok(verified)) => origin.map(|t| (t, verified)),
        None => {
            origin?;
            tracing::error!("the origin accepted an upload whose verification never finished");
            Err(Error::new(
                ErrorKind::InternalError,
                "The upload could not be verified.",
            ))
        }
    }
}
