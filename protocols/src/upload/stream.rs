//! An upload's body as a stream of verified bytes: what every server that accepts a
//! write hands its backend (the gateway forwards it to the origin, the origin stub
//! drains it into a staging file).
//!
//! The stream yields the decoded bytes of a client body while [`UploadVerifier`] checks
//! everything the client claims about it (`aws-chunked` framing with its chunk and
//! trailer signatures, `x-amz-content-sha256`, `Content-MD5`, flexible checksums). Two
//! invariants make a tampered, longer, shorter or cut-off body change nothing at a
//! consumer that commits once it has the announced length:
//! - never more than the announced length leaves: a body that decodes to more is
//!   refused at the first byte too many;
//! - the byte that completes the body leaves only after every check has passed (the
//!   last piece is held back; while anything is held, what was released is strictly
//!   shorter than the body).
//!
//! A failed check ends the stream with an error; [`settle`] turns the two results (the
//! client's checks, the consumer's own) into one.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use http_body::Body as _;

use super::{UploadClaims, UploadVerifier};
use crate::checksum::ChecksumAlgorithm;
use crate::server::RequestBody;
use crate::{Error, ErrorKind};

/// What a verified upload turned out to be, read once the stream has ended.
#[derive(Debug, Default, Clone)]
pub struct Verified {
    /// Decoded bytes.
    pub len: u64,
    /// MD5 of the decoded bytes.
    pub md5: [u8; 16],
    /// The verified flexible checksum, from a header or trailer.
    pub checksum: Option<(ChecksumAlgorithm, String)>,
    /// The decoded bytes themselves, for an upload no longer than the stream was told
    /// to keep ([`VerifyingStream::keep_up_to`]).
    pub kept: Option<Bytes>,
}

impl Verified {
    /// The MD5 in hex (an S3 ETag's form).
    pub fn md5_hex(&self) -> String {
        hex::encode(self.md5)
    }

    /// The MD5 in base64 (`Content-MD5`'s form).
    pub fn md5_base64(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(self.md5)
    }
}

/// The shared outcome of a verifying stream: set when the stream ends.
pub type UploadOutcome = Arc<Mutex<Option<Result<Verified, Error>>>>;

/// Decodes and verifies a client body while yielding its decoded bytes.
pub struct VerifyingStream {
    body: RequestBody,
    /// Taken when the body ends.
    verifier: Option<UploadVerifier>,
    /// The decoded length the client announced, when it did.
    announced: Option<u64>,
    idle: Duration,
    idle_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    held: Option<Bytes>,
    done: bool,
    outcome: UploadOutcome,
    kept: Option<Vec<u8>>,
}

impl std::fmt::Debug for VerifyingStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyingStream")
            .field("announced", &self.announced)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl VerifyingStream {
    /// Wraps a client body: it must decode to the length the claims announce (when they
    /// do), to at most `limit` bytes, and it fails when it sends nothing for `idle`.
    pub fn new(
        body: RequestBody,
        claims: UploadClaims,
        limit: u64,
        idle: Duration,
    ) -> (VerifyingStream, UploadOutcome) {
        let outcome: UploadOutcome = Arc::new(Mutex::new(None));
        let announced = claims.announced_len;
        let v = VerifyingStream {
            body,
            verifier: Some(UploadVerifier::new(claims, None, limit)),
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

    /// The decoded length the client announced, when it did.
    pub fn announced(&self) -> Option<u64> {
        self.announced
    }

    /// The announced length, for a backend that must state it to an origin before the
    /// body (every origin write does).
    ///
    /// # Errors
    /// [`ErrorKind::MissingContentLength`] when the client announced none.
    pub fn required_len(&self) -> Result<u64, Error> {
        self.announced.ok_or_else(|| {
            Error::new(
                ErrorKind::MissingContentLength,
                "You must provide the Content-Length HTTP header.",
            )
        })
    }

    /// Also keeps a copy of the decoded bytes, for [`Verified::kept`], when the
    /// announced length is at most `max` bytes (0, or no announced length, keeps
    /// nothing). The copy is bounded by the announced length, which the stream never
    /// exceeds.
    pub fn keep_up_to(mut self, max: u64) -> VerifyingStream {
        if let Some(len) = self.announced
            && max > 0
            && len <= max
        {
            self.kept = Some(Vec::with_capacity(len as usize));
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
            md5: upload.md5,
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

    /// Reads the stream to its end, writing each verified piece to `sink` (and telling
    /// `on_piece` its length), and gives what the body turned out to be: the way a
    /// consumer that stores the body itself (rather than streaming it on) receives an
    /// upload. `sink` is flushed; whatever it holds after a failure is the caller's to
    /// discard.
    ///
    /// # Errors
    /// The failed check, or the sink's I/O error as [`ErrorKind::InternalError`].
    pub async fn drain_to<W>(
        mut self,
        sink: &mut W,
        on_piece: impl Fn(usize),
    ) -> Result<Verified, Error>
    where
        W: tokio::io::AsyncWrite + Unpin,
    {
        use tokio::io::AsyncWriteExt as _;
        let write_err = |e: std::io::Error| {
            Error::new(ErrorKind::InternalError, format!("writing the body: {e}")).with_source(e)
        };
        let outcome = self.outcome.clone();
        while let Some(item) = futures_util::StreamExt::next(&mut self).await {
            let Ok(piece) = item else { break };
            on_piece(piece.len());
            sink.write_all(&piece).await.map_err(write_err)?;
        }
        sink.flush().await.map_err(write_err)?;
        settle(&outcome, Ok(())).map(|((), v)| v)
    }

    /// The body to send an origin (reqwest) for this stream.
    ///
    /// An HTTP client never polls the body of a request whose Content-Length is 0, so for
    /// an announced length of 0 the stream is read to its end here first (its framing,
    /// trailer and digests still have to verify) and the origin gets an empty body only if
    /// it did.
    ///
    /// # Errors
    /// The failed check of an empty upload; the origin is then never contacted.
    pub async fn into_origin_body(mut self) -> Result<reqwest::Body, Error> {
        if self.announced != Some(0) {
            return Ok(reqwest::Body::wrap_stream(self));
        }
        while let Some(item) = futures_util::StreamExt::next(&mut self).await {
            if item.is_err() {
                break;
            }
        }
        let mut outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        match outcome.take() {
            Some(Err(e)) => Err(e),
            other => {
                *outcome = other;
                Ok(reqwest::Body::from(Bytes::new()))
            }
        }
    }
}

impl Stream for VerifyingStream {
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

/// An upload's one result, from the client's checks and the consumer's answer (the
/// origin's, or the staging file's).
///
/// The client's checks decide first: a tampered body is the client's error even though
/// the consumer saw it as a broken upload. A consumer that failed before the body ended
/// gives its own error. A consumer that *succeeded* although the verification never
/// finished would have committed unverified bytes; the invariants above rule that out,
/// and should it happen anyway it is an error, never a success.
///
/// # Errors
/// The failed check, the consumer's error, or [`ErrorKind::InternalError`].
pub fn settle<T>(
    outcome: &UploadOutcome,
    consumer: Result<T, Error>,
) -> Result<(T, Verified), Error> {
    let taken = outcome.lock().unwrap_or_else(|p| p.into_inner()).take();
    match taken {
        Some(Err(e)) => Err(e),
        Some(Ok(verified)) => consumer.map(|t| (t, verified)),
        None => {
            consumer?;
            tracing::error!("an upload was accepted although its verification never finished");
            Err(Error::new(
                ErrorKind::InternalError,
                "The upload could not be verified.",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use http_body_util::BodyExt as _;

    fn body(pieces: &[&'static [u8]]) -> RequestBody {
        let frames: Vec<Result<http_body::Frame<Bytes>, crate::server::BoxError>> = pieces
            .iter()
            .map(|p| Ok(http_body::Frame::data(Bytes::from_static(p))))
            .collect();
        http_body_util::StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
    }

    fn claims(len: u64, md5_of: &[u8]) -> UploadClaims {
        use base64::Engine;
        use md5::Digest as _;
        UploadClaims {
            content_md5: Some(
                base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(md5_of)),
            ),
            announced_len: Some(len),
            ..UploadClaims::default()
        }
    }

    #[tokio::test]
    async fn a_verified_body_drains_whole_and_a_tampered_one_fails_before_its_last_piece() {
        let (s, _) = VerifyingStream::new(
            body(&[b"hello ", b"world"]),
            claims(11, b"hello world"),
            u64::MAX,
            Duration::from_secs(5),
        );
        let mut got = Vec::new();
        let v = s.drain_to(&mut got, |_| {}).await.unwrap();
        assert_eq!(got, b"hello world");
        assert_eq!(v.len, 11);
        // The MD5 claim does not match: the held-back last piece never leaves.
        let (s, _) = VerifyingStream::new(
            body(&[b"hello ", b"World"]),
            claims(11, b"hello world"),
            u64::MAX,
            Duration::from_secs(5),
        );
        let mut got = Vec::new();
        let e = s.drain_to(&mut got, |_| {}).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadDigest);
        assert_eq!(got, b"hello ");
    }

    #[tokio::test]
    async fn a_body_longer_than_announced_fails_at_the_first_byte_too_many() {
        let (s, _) = VerifyingStream::new(
            body(&[b"hello ", b"world!"]),
            claims(11, b"hello world!"),
            u64::MAX,
            Duration::from_secs(5),
        );
        let e = s
            .drain_to(&mut tokio::io::sink(), |_| {})
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::IncompleteBody);
    }
}
