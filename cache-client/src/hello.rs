//! The connecting side of the data plane's Hello exchange
//! ([`talon_core::cluster_auth`]), for every peer of a worker: the cache client's
//! connections, the load generator, test tools.
//!
//! The peer sends Hello with a fresh nonce and its role, checks that the worker names
//! the member it dialled and proves the cluster secret for that name (any other is not
//! one of ours: its bytes are never read), sends its own proof and waits for Welcome. Frames are read exactly, a
//! header and then its payload, so nothing after Welcome is consumed here.

use std::time::Duration;

use talon_core::Message;
use talon_core::cluster_auth::{ClusterSecret, HELLO_VERSION, HelloSide, NONCE_LEN, Nonce, Role};
use talon_core::wire::{FrameHeader, HEADER_LEN};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::{CacheClientError, Result};

fn refused(why: impl Into<String>) -> CacheClientError {
    CacheClientError::Unavailable(format!("the worker's Hello failed: {}", why.into()))
}

/// Reads one whole control frame.
async fn read_frame<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Message> {
    let mut head = [0u8; HEADER_LEN];
    stream
        .read_exact(&mut head)
        .await
        .map_err(|e| refused(format!("reading: {e}")))?;
    let header = FrameHeader::decode(&head).map_err(|e| refused(e.to_string()))?;
    if header.message_type().is_bulk() {
        return Err(refused("a bulk frame during the Hello exchange"));
    }
    let mut payload = vec![0u8; header.payload_len() as usize];
    stream
        .read_exact(&mut payload)
        .await
        .map_err(|e| refused(format!("reading: {e}")))?;
    Message::decode(&header, &payload).map_err(|e| refused(e.to_string()))
}

/// Authenticates a fresh connection to a worker as `role`, within `timeout`. With
/// `expected`, the worker must be that member (the id the membership gives the address
/// dialled): a worker that names another id is refused before this side proves
/// anything, so a process at a dead member's address cannot relay a live member's
/// Hello. Returns the id the worker named.
///
/// # Errors
/// [`CacheClientError::Unavailable`] when the worker refuses (another secret), cannot
/// prove the secret itself, is not the member expected, or answers out of protocol;
/// [`CacheClientError::DeadlineExceeded`] when it does not finish in time.
pub async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    secret: &ClusterSecret,
    role: Role,
    expected: Option<&str>,
    timeout: Duration,
) -> Result<String> {
    tokio::time::timeout(timeout, exchange(stream, secret, role, expected))
        .await
        .map_err(|_| {
            CacheClientError::DeadlineExceeded(format!(
                "the worker's Hello had no answer within {timeout:?}"
            ))
        })?
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    secret: &ClusterSecret,
    role: Role,
    expected: Option<&str>,
) -> Result<String> {
    let mut nonce: Nonce = [0; NONCE_LEN];
    getrandom::getrandom(&mut nonce).map_err(|e| refused(format!("no randomness: {e}")))?;
    let hello = Message::Hello {
        version: HELLO_VERSION,
        role,
        nonce,
    }
    .encode(0)
    .map_err(|e| refused(e.to_string()))?;
    stream
        .write_all(&hello)
        .await
        .map_err(|e| refused(format!("writing: {e}")))?;
    let (worker_nonce, worker_proof, worker) = match read_frame(stream).await? {
        Message::HelloReply {
            nonce,
            proof,
            worker,
        } => (nonce, proof, worker),
        Message::Error(e) => return Err(refused(format!("{}: {}", e.code, e.message))),
        other => {
            return Err(refused(format!(
                "{:?} instead of HelloReply",
                other.message_type()
            )));
        }
    };
    if let Some(expected) = expected
        && worker != expected
    {
        return Err(refused(format!(
            "the worker at this address says it is {worker:?}, not the member {expected:?} \
             the membership places here"
        )));
    }
    if !secret.verify_hello_proof(
        HelloSide::Worker,
        role,
        &worker,
        &nonce,
        &worker_nonce,
        &worker_proof,
    ) {
        return Err(refused(
            "the worker cannot prove the cluster secret: not a member of this cluster",
        ));
    }
    let proof = secret.hello_proof(HelloSide::Peer, role, &worker, &nonce, &worker_nonce);
    let frame = Message::HelloProof { proof }
        .encode(0)
        .map_err(|e| refused(e.to_string()))?;
    stream
        .write_all(&frame)
        .await
        .map_err(|e| refused(format!("writing: {e}")))?;
    match read_frame(stream).await? {
        Message::Welcome => Ok(worker),
        Message::Error(e) => Err(refused(format!("{}: {}", e.code, e.message))),
        other => Err(refused(format!(
            "{:?} instead of Welcome",
            other.message_type()
        ))),
    }
}
