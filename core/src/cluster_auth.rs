//! The cluster secret and what is proved with it, sans-IO: the data plane's Hello
//! proofs and the coordinator API's request signatures.
//!
//! One secret is shared by the coordinator, the workers and the gateways of a cluster
//! (`--cluster-secret-file`, `TALON_CLUSTER_SECRET`). It never travels: each side proves
//! it knows the secret with HMAC-SHA256 over values the other side chose or can check.
//!
//! - **Hello** (data plane): the connecting peer sends a fresh 16-byte nonce and the role
//!   it claims; the worker answers with a nonce of its own, its worker id and its proof
//!   over both nonces, the role and that id; the peer checks that the id is the member
//!   it meant to reach and answers with its proof over the same values. Each proof is
//!   bound to its side by a label, so one side's proof is never the other's; to both
//!   nonces, so a recorded Hello never verifies on another connection; and to the
//!   worker's id, so a proof made by (or for) one worker is worthless at another's
//!   address: a process that holds no secret and sits at a dead worker's address
//!   cannot relay a live worker's Hello to pass as the dead one. The peer may pipeline
//!   requests right after its proof; a worker that finds it wrong answers with an error
//!   frame and closes. Once per connection, not per frame: the frames after it are not
//!   authenticated one by one (docs/security.md says what the data plane's network
//!   must then keep out).
//! - **API signatures** (coordinator): method, path, a Unix timestamp, the role and the
//!   SHA-256 of the body, so a captured request can be replayed only unchanged and only
//!   within the coordinator's window (checked by the caller, who has a clock).
//!
//! The HMAC key is derived from the secret (`HMAC(secret, "talon cluster key v1")`), so
//! the secret's own bytes are used for nothing else. Traffic is authenticated, not
//! encrypted.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use crate::error::Error;

/// Fewest bytes a cluster secret may have.
pub const MIN_SECRET_LEN: usize = 16;

/// Length of a Hello nonce, in bytes.
pub const NONCE_LEN: usize = 16;

/// Length of a proof (an HMAC-SHA256), in bytes.
pub const PROOF_LEN: usize = 32;

/// The version of the Hello exchange a peer speaks, carried in its Hello. Version 2
/// (2026-12) names the worker in its HelloReply and in both proofs; a worker refuses
/// version 1, whose proofs named no one.
pub const HELLO_VERSION: u8 = 2;

/// Longest worker id a HelloReply carries, in bytes (a member id is at most this).
pub const MAX_HELLO_WORKER_ID_LEN: usize = 128;

/// A Hello nonce.
pub type Nonce = [u8; NONCE_LEN];

/// A Hello proof.
pub type Proof = [u8; PROOF_LEN];

/// What an authenticated peer may do. The role is claimed by the peer and covered by
/// every proof and signature, so it cannot be changed on the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Role {
    /// Reads: Stat, ReadRange, Prefetch and Ping on the data plane; the coordinator's
    /// views.
    Reader = 1,
    /// A worker: registers, heartbeats and drains itself at the coordinator.
    Worker = 2,
    /// May push bytes into a worker's cache (Ingest) as well as read.
    Ingester = 3,
    /// Operates the cluster: drains any worker.
    Admin = 4,
}

impl Role {
    /// Every role, in wire-value order.
    pub const ALL: [Role; 4] = [Role::Reader, Role::Worker, Role::Ingester, Role::Admin];

    /// The role with this wire value.
    pub fn from_u8(v: u8) -> Option<Role> {
        Role::ALL.into_iter().find(|r| *r as u8 == v)
    }

    /// The wire value.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// The name used in headers and logs.
    pub fn name(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Worker => "worker",
            Role::Ingester => "ingester",
            Role::Admin => "admin",
        }
    }

    /// The role with this name.
    pub fn from_name(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.name() == name)
    }

    /// Whether a peer in this role may push bytes into a worker's cache.
    pub fn may_ingest(self) -> bool {
        self == Role::Ingester
    }
}

/// Which side of a Hello a proof comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloSide {
    /// The worker (answers the Hello).
    Worker,
    /// The connecting peer.
    Peer,
}

/// The cluster secret, kept only as the HMAC key derived from it.
#[derive(Clone)]
pub struct ClusterSecret {
    key: [u8; 32],
}

impl PartialEq for ClusterSecret {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for ClusterSecret {}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(<redacted>)")
    }
}

type HmacSha256 = Hmac<Sha256>;

fn mac(key: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length; this cannot fail.
    match <HmacSha256 as KeyInit>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable_hmac(),
    }
}

#[cold]
fn unreachable_hmac() -> HmacSha256 {
    // `new_from_slice` only fails for fixed-size keys; HMAC has none. Keep a value so
    // nothing here panics.
    <HmacSha256 as KeyInit>::new(&Default::default())
}

impl ClusterSecret {
    /// A secret from its bytes. Leading and trailing ASCII whitespace is not part of it
    /// (a secret file usually ends with a newline).
    ///
    /// # Errors
    /// [`Error::SecretTooShort`] for fewer than [`MIN_SECRET_LEN`] bytes.
    pub fn new(bytes: &[u8]) -> Result<ClusterSecret, Error> {
        let bytes = bytes.trim_ascii();
        if bytes.len() < MIN_SECRET_LEN {
            return Err(Error::SecretTooShort {
                len: bytes.len(),
                min: MIN_SECRET_LEN,
            });
        }
        let mut m = mac(bytes);
        m.update(b"talon cluster key v1");
        Ok(ClusterSecret {
            key: m.finalize().into_bytes().into(),
        })
    }

    /// The proof one side of a Hello sends, on a connection to the worker `worker`
    /// (its member id; empty for a worker outside any membership).
    pub fn hello_proof(
        &self,
        side: HelloSide,
        role: Role,
        worker: &str,
        peer_nonce: &Nonce,
        worker_nonce: &Nonce,
    ) -> Proof {
        self.hello_mac(side, role, worker, peer_nonce, worker_nonce)
            .finalize()
            .into_bytes()
            .into()
    }

    /// Whether `proof` is the one `side` must send on a connection to `worker`,
    /// compared in constant time.
    pub fn verify_hello_proof(
        &self,
        side: HelloSide,
        role: Role,
        worker: &str,
        peer_nonce: &Nonce,
        worker_nonce: &Nonce,
        proof: &Proof,
    ) -> bool {
        self.hello_mac(side, role, worker, peer_nonce, worker_nonce)
            .verify_slice(proof)
            .is_ok()
    }

    fn hello_mac(
        &self,
        side: HelloSide,
        role: Role,
        worker: &str,
        peer_nonce: &Nonce,
        worker_nonce: &Nonce,
    ) -> HmacSha256 {
        let mut m = mac(&self.key);
        m.update(match side {
            HelloSide::Worker => b"talon hello v2 worker",
            HelloSide::Peer => b"talon hello v2 peer\0\0",
        });
        m.update(&[role.as_u8()]);
        m.update(peer_nonce);
        m.update(worker_nonce);
        // Length-prefixed, so no id runs into what follows it.
        m.update(
            &u64::try_from(worker.len())
                .unwrap_or(u64::MAX)
                .to_be_bytes(),
        );
        m.update(worker.as_bytes());
        m
    }

    /// The signature of a coordinator API request, lower-case hex.
    pub fn api_signature(
        &self,
        role: Role,
        method: &str,
        path: &str,
        unix_seconds: u64,
        body: &[u8],
    ) -> String {
        hex::encode(
            self.api_mac(role, method, path, unix_seconds, body)
                .finalize()
                .into_bytes(),
        )
    }

    /// Whether `signature_hex` signs this request, compared in constant time.
    pub fn verify_api_signature(
        &self,
        role: Role,
        method: &str,
        path: &str,
        unix_seconds: u64,
        body: &[u8],
        signature_hex: &str,
    ) -> bool {
        let Ok(sent) = hex::decode(signature_hex) else {
            return false;
        };
        self.api_mac(role, method, path, unix_seconds, body)
            .verify_slice(&sent)
            .is_ok()
    }

    fn api_mac(
        &self,
        role: Role,
        method: &str,
        path: &str,
        unix_seconds: u64,
        body: &[u8],
    ) -> HmacSha256 {
        let mut m = mac(&self.key);
        let text = format!(
            "talon api v1\n{}\n{method}\n{path}\n{unix_seconds}\n{}",
            role.name(),
            hex::encode(Sha256::digest(body))
        );
        m.update(text.as_bytes());
        m
    }
}

/// The value of the coordinator API's authentication header, `x-talon-auth`:
/// `<role> <unix seconds> <signature hex>`.
pub fn api_auth_header(
    secret: &ClusterSecret,
    role: Role,
    method: &str,
    path: &str,
    unix_seconds: u64,
    body: &[u8],
) -> String {
    format!(
        "{} {unix_seconds} {}",
        role.name(),
        secret.api_signature(role, method, path, unix_seconds, body)
    )
}

/// A parsed `x-talon-auth` value: role, timestamp, signature.
pub fn parse_api_auth_header(value: &str) -> Option<(Role, u64, &str)> {
    let mut parts = value.split(' ');
    let role = Role::from_name(parts.next()?)?;
    let ts = parts.next()?.parse().ok()?;
    let sig = parts.next()?;
    parts.next().is_none().then_some((role, ts, sig))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> ClusterSecret {
        ClusterSecret::new(b"0123456789abcdef0123456789abcdef\n").expect("secret")
    }

    #[test]
    fn short_secrets_are_refused_and_whitespace_is_trimmed() {
        assert!(matches!(
            ClusterSecret::new(b"  short  \n"),
            Err(Error::SecretTooShort { len: 5, .. })
        ));
        let a = ClusterSecret::new(b"0123456789abcdef0123456789abcdef").expect("a");
        let b = secret();
        assert_eq!(a.key, b.key);
        assert_eq!(format!("{a:?}"), "ClusterSecret(<redacted>)");
    }

    #[test]
    fn hello_proofs_bind_side_role_worker_and_both_nonces() {
        let s = secret();
        let (pn, wn) = ([1u8; 16], [2u8; 16]);
        let worker = s.hello_proof(HelloSide::Worker, Role::Reader, "w1", &pn, &wn);
        let peer = s.hello_proof(HelloSide::Peer, Role::Reader, "w1", &pn, &wn);
        assert_ne!(worker, peer, "one side's proof is never the other's");
        let ok = |side, role, id: &str, pn: &Nonce, wn: &Nonce, proof: &Proof| {
            s.verify_hello_proof(side, role, id, pn, wn, proof)
        };
        assert!(ok(HelloSide::Peer, Role::Reader, "w1", &pn, &wn, &peer));
        assert!(ok(HelloSide::Worker, Role::Reader, "w1", &pn, &wn, &worker));
        assert!(!ok(HelloSide::Peer, Role::Ingester, "w1", &pn, &wn, &peer));
        assert!(!ok(
            HelloSide::Peer,
            Role::Reader,
            "w1",
            &pn,
            &[3; 16],
            &peer
        ));
        assert!(!ok(
            HelloSide::Peer,
            Role::Reader,
            "w1",
            &[3; 16],
            &wn,
            &peer
        ));
        // Made by (or for) one worker, worthless at another.
        assert!(!ok(
            HelloSide::Worker,
            Role::Reader,
            "w2",
            &pn,
            &wn,
            &worker
        ));
        assert!(!ok(HelloSide::Peer, Role::Reader, "w2", &pn, &wn, &peer));
        assert!(!ok(HelloSide::Worker, Role::Reader, "", &pn, &wn, &worker));
        let other = ClusterSecret::new(b"another secret, sixteen+").expect("other");
        assert!(!other.verify_hello_proof(HelloSide::Peer, Role::Reader, "w1", &pn, &wn, &peer));
    }

    #[test]
    fn api_signatures_cover_every_field() {
        let s = secret();
        let sig = s.api_signature(Role::Worker, "POST", "/v1/workers/register", 100, b"{}");
        assert!(s.verify_api_signature(
            Role::Worker,
            "POST",
            "/v1/workers/register",
            100,
            b"{}",
            &sig
        ));
        for (role, method, path, ts, body) in [
            (Role::Admin, "POST", "/v1/workers/register", 100, &b"{}"[..]),
            (Role::Worker, "GET", "/v1/workers/register", 100, b"{}"),
            (Role::Worker, "POST", "/v1/workers/w1/drain", 100, b"{}"),
            (Role::Worker, "POST", "/v1/workers/register", 101, b"{}"),
            (
                Role::Worker,
                "POST",
                "/v1/workers/register",
                100,
                b"{\"weight\":9}",
            ),
        ] {
            assert!(!s.verify_api_signature(role, method, path, ts, body, &sig));
        }
        assert!(!s.verify_api_signature(Role::Worker, "POST", "/", 100, b"", "not hex"));
        let header = api_auth_header(&s, Role::Reader, "GET", "/v1/members", 7, b"");
        let (role, ts, sig) = parse_api_auth_header(&header).expect("parses");
        assert_eq!((role, ts), (Role::Reader, 7));
        assert!(s.verify_api_signature(role, "GET", "/v1/members", ts, b"", sig));
        assert!(parse_api_auth_header("reader 7").is_none());
        assert!(parse_api_auth_header("root 7 00").is_none());
    }
}
