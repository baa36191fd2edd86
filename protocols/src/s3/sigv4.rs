//! AWS Signature Version 4 for S3: verifying incoming requests (header and presigned
//! forms) and signing outgoing ones.
//!
//! Verification builds the canonical request here, because aws-sigv4 keeps its
//! canonicalisation private, and uses aws-sigv4's public primitives
//! ([`generate_signing_key`], [`calculate_signature`]) for the HMAC chain. Signing goes
//! through aws-sigv4's request signer, so the two directions are checked against each
//! other in the tests as well as against AWS's published test suite.
//!
//! S3 rules: the path is URI-encoded once (not twice, as other services do) and never
//! normalised; the payload hash is whatever `x-amz-content-sha256` says (a hex SHA-256,
//! `UNSIGNED-PAYLOAD` or one of the `STREAMING-*` markers), and is required with header
//! authentication; presigned URLs use `UNSIGNED-PAYLOAD`.

use std::time::{Duration, SystemTime};

use aws_sigv4::sign::v4::{calculate_signature, generate_signing_key};
use http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::dates::{format_amz_date, parse_amz_date};
use crate::error::{Error, ErrorKind, Result};
use crate::uri_encoding::{decode, encode_path, encode_strict, parse_query};

/// The only algorithm S3 accepts for SigV4.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";
/// The payload hash of a request whose body is not signed.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";
/// SHA-256 of the empty string, hex.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/// How far a request's clock may be from ours (S3 allows 15 minutes).
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(15 * 60);
/// The longest validity of a presigned URL (7 days).
pub const MAX_PRESIGNED_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);

/// `date/region/service/aws4_request`, the scope a signature is valid for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialScope {
    /// `YYYYMMDD`.
    pub date: String,
    /// Region name, e.g. `us-east-1`.
    pub region: String,
    /// Service name, `s3` for S3.
    pub service: String,
}

impl CredentialScope {
    /// The scope as it appears in the string to sign.
    pub fn to_scope_string(&self) -> String {
        format!(
            "{}/{}/{}/aws4_request",
            self.date, self.region, self.service
        )
    }
}

/// Where the signature was carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthForm {
    /// `Authorization: AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...`.
    Header,
    /// `X-Amz-*` query parameters, valid for `expires`.
    Presigned {
        /// `X-Amz-Expires`.
        expires: Duration,
    },
}

/// A parsed, not yet verified, SigV4 authorization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigV4Authorization {
    /// The access key id the client claims.
    pub access_key: String,
    /// The credential scope.
    pub scope: CredentialScope,
    /// Lower-case names of the signed headers, in the client's order.
    pub signed_headers: Vec<String>,
    /// The hex signature sent by the client.
    pub signature: String,
    /// `X-Amz-Date`.
    pub amz_date: String,
    /// Header or presigned.
    pub form: AuthForm,
}

/// How the body of a request is covered by its signature (`x-amz-content-sha256`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadMode {
    /// `UNSIGNED-PAYLOAD`: the body is not covered.
    Unsigned,
    /// A hex SHA-256 of the whole body, which the receiver must check.
    Sha256(String),
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`: `aws-chunked` with signed chunks.
    StreamingSigned,
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`: signed chunks and a signed trailer.
    StreamingSignedTrailer,
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: `aws-chunked`, unsigned, checksum trailer.
    StreamingUnsignedTrailer,
}

impl PayloadMode {
    /// Parses the `x-amz-content-sha256` value.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for anything else.
    pub fn parse(value: &str) -> Result<PayloadMode> {
        Ok(match value {
            UNSIGNED_PAYLOAD => PayloadMode::Unsigned,
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" => PayloadMode::StreamingSigned,
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER" => PayloadMode::StreamingSignedTrailer,
            "STREAMING-UNSIGNED-PAYLOAD-TRAILER" => PayloadMode::StreamingUnsignedTrailer,
            v if v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()) => {
                PayloadMode::Sha256(v.to_ascii_lowercase())
            }
            v => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "x-amz-content-sha256 '{v}' is neither a SHA-256 nor a known payload mode"
                    ),
                ));
            }
        })
    }

    /// Whether the body uses `aws-chunked` framing.
    pub fn is_chunked(&self) -> bool {
        matches!(
            self,
            PayloadMode::StreamingSigned
                | PayloadMode::StreamingSignedTrailer
                | PayloadMode::StreamingUnsignedTrailer
        )
    }
}

/// The parts of an HTTP request a signature covers.
#[derive(Debug, Clone, Copy)]
pub struct RequestParts<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// The path exactly as received (percent-encoded).
    pub raw_path: &'a str,
    /// The query string exactly as received, without `?` (empty if none).
    pub raw_query: &'a str,
    /// The request headers.
    pub headers: &'a HeaderMap,
}

/// What a successful verification establishes; chunk and trailer signatures of an
/// `aws-chunked` body are verified with it.
#[derive(Clone)]
pub struct VerifiedSigV4 {
    /// The authenticated access key id.
    pub access_key: String,
    /// The scope the request was signed for.
    pub scope: CredentialScope,
    /// `X-Amz-Date` of the request.
    pub amz_date: String,
    /// The request's signature: the seed of an `aws-chunked` signature chain.
    pub seed_signature: String,
    /// The derived signing key (not the secret).
    pub signing_key: Vec<u8>,
}

impl std::fmt::Debug for VerifiedSigV4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifiedSigV4")
            .field("access_key", &self.access_key)
            .field("scope", &self.scope)
            .field("amz_date", &self.amz_date)
            .finish_non_exhaustive()
    }
}

fn malformed(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::MalformedAuthorization, msg)
}

/// Finds a SigV4 authorization in the header or the query. `Ok(None)` means the
/// request is anonymous.
///
/// # Errors
/// [`ErrorKind::MalformedAuthorization`] when an authorization is present but cannot be
/// parsed; [`ErrorKind::NotImplemented`] for other schemes (SigV2, SigV4A).
pub fn parse_authorization(
    headers: &HeaderMap,
    raw_query: &str,
) -> Result<Option<SigV4Authorization>> {
    if let Some(value) = headers.get(http::header::AUTHORIZATION) {
        let value = value
            .to_str()
            .map_err(|_| malformed("Authorization header is not ASCII"))?;
        return parse_authorization_header(value, headers).map(Some);
    }
    if raw_query.contains("X-Amz-Signature=") || raw_query.contains("X-Amz-Algorithm=") {
        return parse_presigned(raw_query).map(Some);
    }
    if raw_query.contains("Signature=") && raw_query.contains("AWSAccessKeyId=") {
        return Err(Error::new(
            ErrorKind::NotImplemented,
            "Signature Version 2 is not supported; use SigV4",
        ));
    }
    Ok(None)
}

fn parse_authorization_header(value: &str, headers: &HeaderMap) -> Result<SigV4Authorization> {
    let Some(rest) = value.strip_prefix(ALGORITHM) else {
        let scheme = value.split_whitespace().next().unwrap_or("");
        return Err(Error::new(
            ErrorKind::NotImplemented,
            format!("authorization scheme '{scheme}' is not supported; use {ALGORITHM}"),
        ));
    };
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("Credential=") {
            credential = Some(v);
        } else if let Some(v) = part.strip_prefix("SignedHeaders=") {
            signed = Some(v);
        } else if let Some(v) = part.strip_prefix("Signature=") {
            signature = Some(v);
        }
    }
    let (Some(credential), Some(signed), Some(signature)) = (credential, signed, signature) else {
        return Err(malformed(
            "Authorization must carry Credential, SignedHeaders and Signature",
        ));
    };
    let amz_date = headers
        .get("x-amz-date")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| malformed("x-amz-date header is required with SigV4"))?;
    build_authorization(credential, signed, signature, amz_date, AuthForm::Header)
}

fn parse_presigned(raw_query: &str) -> Result<SigV4Authorization> {
    let pairs = parse_query(raw_query);
    let get = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| malformed(format!("presigned URL lacks {name}")))
    };
    let algorithm = get("X-Amz-Algorithm")?;
    if algorithm != ALGORITHM {
        return Err(Error::new(
            ErrorKind::NotImplemented,
            format!("X-Amz-Algorithm '{algorithm}' is not supported"),
        ));
    }
    let expires: i64 = get("X-Amz-Expires")?
        .parse()
        .map_err(|_| malformed("X-Amz-Expires must be a number of seconds"))?;
    // A lifetime out of range is a URL that grants nothing: refused as an expired one
    // (403, as S3 and SigV2's Expires here), not as a malformed one.
    let expires = u64::try_from(expires)
        .ok()
        .map(Duration::from_secs)
        .filter(|e| !e.is_zero() && *e <= MAX_PRESIGNED_EXPIRY)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::ExpiredRequest,
                "X-Amz-Expires must be between 1 and 604800 seconds",
            )
        })?;
    build_authorization(
        get("X-Amz-Credential")?,
        get("X-Amz-SignedHeaders")?,
        get("X-Amz-Signature")?,
        get("X-Amz-Date")?,
        AuthForm::Presigned { expires },
    )
}

fn build_authorization(
    credential: &str,
    signed_headers: &str,
    signature: &str,
    amz_date: &str,
    form: AuthForm,
) -> Result<SigV4Authorization> {
    let mut parts = credential.split('/');
    let (Some(access_key), Some(date), Some(region), Some(service), Some("aws4_request"), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(malformed(format!(
            "Credential '{credential}' is not of the form KEY/YYYYMMDD/REGION/SERVICE/aws4_request"
        )));
    };
    if access_key.is_empty() || date.len() != 8 || !amz_date.starts_with(date) {
        return Err(malformed(
            "the credential date must be the date of X-Amz-Date",
        ));
    }
    let signed_headers: Vec<String> = signed_headers
        .split(';')
        .map(str::to_ascii_lowercase)
        .collect();
    if signed_headers.iter().any(String::is_empty) || !signed_headers.iter().any(|h| h == "host") {
        return Err(malformed("SignedHeaders must list the host header"));
    }
    if signature.len() != 64 || !signature.bytes().all(|b| b.is_ascii_hexdigit()) {
        // S3 answers a signature it cannot match as not matching, whatever its shape.
        return Err(Error::new(
            ErrorKind::SignatureDoesNotMatch,
            "The request signature we calculated does not match the signature you provided.",
        ));
    }
    Ok(SigV4Authorization {
        access_key: access_key.to_owned(),
        scope: CredentialScope {
            date: date.to_owned(),
            region: region.to_owned(),
            service: service.to_owned(),
        },
        signed_headers,
        signature: signature.to_ascii_lowercase(),
        amz_date: amz_date.to_owned(),
        form,
    })
}

/// The payload hash the canonical request of `parts` uses under `auth`.
///
/// # Errors
/// [`ErrorKind::InvalidRequest`] when header authentication lacks `x-amz-content-sha256`.
pub fn payload_hash_of<'a>(parts: &RequestParts<'a>, auth: &SigV4Authorization) -> Result<&'a str> {
    let header = parts
        .headers
        .get("x-amz-content-sha256")
        .and_then(|v| v.to_str().ok());
    match (auth.form, header) {
        (_, Some(v)) => Ok(v),
        (AuthForm::Presigned { .. }, None) => Ok(UNSIGNED_PAYLOAD),
        (AuthForm::Header, None) => Err(Error::new(
            ErrorKind::InvalidRequest,
            "Missing required header for this request: x-amz-content-sha256",
        )),
    }
}

/// Builds the canonical request of SigV4 for S3 (single encoding, no normalisation).
///
/// `path_mode` chooses how the path is canonicalised: re-encoded from its decoded form
/// (what SDKs compute), or taken as received (what a client that does not encode some
/// characters computes).
///
/// # Errors
/// [`ErrorKind::SignatureDoesNotMatch`] when a signed header is missing from the request.
pub fn canonical_request(
    parts: &RequestParts<'_>,
    signed_headers: &[String],
    payload_hash: &str,
    path_mode: PathMode,
) -> Result<String> {
    let path = match path_mode {
        PathMode::Reencoded => encode_path(&decode(parts.raw_path)),
        PathMode::AsReceived => parts.raw_path.to_owned(),
    };
    canonical_request_for_path(parts, &path, signed_headers, payload_hash)
}

/// [`canonical_request`] with the canonical URI already formed (`path`; empty stands
/// for `/`), written into one string.
fn canonical_request_for_path(
    parts: &RequestParts<'_>,
    path: &str,
    signed_headers: &[String],
    payload_hash: &str,
) -> Result<String> {
    let path = if path.is_empty() { "/" } else { path };
    let mut query: Vec<(String, String)> = parse_query(parts.raw_query)
        .into_iter()
        .filter(|(k, _)| k != "X-Amz-Signature")
        .map(|(k, v)| (encode_strict(&k), encode_strict(&v)))
        .collect();
    query.sort();
    let query = query
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut out = String::with_capacity(512);
    out.push_str(parts.method);
    out.push('\n');
    out.push_str(path);
    out.push('\n');
    out.push_str(&query);
    out.push('\n');
    for name in signed_headers {
        let mut values = parts.headers.get_all(name.as_str()).iter().peekable();
        if values.peek().is_none() {
            return Err(Error::new(
                ErrorKind::SignatureDoesNotMatch,
                format!("signed header '{name}' is not in the request"),
            ));
        }
        out.push_str(name);
        out.push(':');
        for (i, value) in values.enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_canonical_header_value(&mut out, value.as_bytes());
        }
        out.push('\n');
    }
    out.push('\n');
    for (i, name) in signed_headers.iter().enumerate() {
        if i > 0 {
            out.push(';');
        }
        out.push_str(name);
    }
    out.push('\n');
    out.push_str(payload_hash);
    Ok(out)
}

/// How the canonical URI is formed from the received path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathMode {
    /// Decode, then encode every byte outside the unreserved set and `/`.
    Reencoded,
    /// Use the path exactly as received.
    AsReceived,
}

/// A header value as the canonical request has it: trimmed, each run of whitespace
/// inside it one space.
fn push_canonical_header_value(out: &mut String, raw: &[u8]) {
    let text = String::from_utf8_lossy(raw);
    for (i, word) in text.split_whitespace().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word);
    }
}

/// The string to sign for a canonical request.
pub fn string_to_sign(amz_date: &str, scope: &CredentialScope, canonical_request: &str) -> String {
    use std::fmt::Write as _;
    let hash = Sha256::digest(canonical_request.as_bytes());
    let mut out = String::with_capacity(160);
    let _ = write!(
        out,
        "{ALGORITHM}\n{amz_date}\n{}/{}/{}/aws4_request\n",
        scope.date, scope.region, scope.service
    );
    let mut hex = [0u8; 64];
    // 64 bytes: twice the digest's 32, what the encoding needs.
    if hex::encode_to_slice(hash.as_slice(), &mut hex).is_ok() {
        out.push_str(std::str::from_utf8(&hex).unwrap_or_default());
    }
    out
}

/// Verifies a request's signature with the secret of its access key, and the request's
/// time window against `now`.
///
/// # Errors
/// [`ErrorKind::SignatureDoesNotMatch`], [`ErrorKind::RequestTimeTooSkewed`] (header form,
/// more than 15 minutes off), [`ErrorKind::ExpiredRequest`] (presigned and expired or not
/// yet valid), [`ErrorKind::MalformedAuthorization`], [`ErrorKind::InvalidRequest`].
pub fn verify(
    parts: &RequestParts<'_>,
    auth: &SigV4Authorization,
    secret: &str,
    now: SystemTime,
) -> Result<VerifiedSigV4> {
    let payload_hash = payload_hash_of(parts, auth)?;
    verify_with_payload_hash(parts, auth, secret, payload_hash, now)
}

/// [`verify`] with an explicit payload hash, for services other than S3 (the published
/// test suite signs with the hash of the body, without a header).
///
/// # Errors
/// As [`verify`].
pub fn verify_with_payload_hash(
    parts: &RequestParts<'_>,
    auth: &SigV4Authorization,
    secret: &str,
    payload_hash: &str,
    now: SystemTime,
) -> Result<VerifiedSigV4> {
    let signed_at = parse_amz_date(&auth.amz_date)?;
    check_time_window(auth.form, signed_at, now)?;
    let signing_key = signing_key_for(secret, signed_at, &auth.scope);
    let reencoded = encode_path(&decode(parts.raw_path));
    let mut matched = false;
    // The path as SDKs encode it, then as received when that differs (a client that
    // leaves some characters unencoded).
    let as_received = (reencoded != parts.raw_path).then_some(parts.raw_path);
    for path in std::iter::once(reencoded.as_str()).chain(as_received) {
        let canonical =
            canonical_request_for_path(parts, path, &auth.signed_headers, payload_hash)?;
        let sts = string_to_sign(&auth.amz_date, &auth.scope, &canonical);
        let expected = calculate_signature(signing_key, sts.as_bytes());
        if constant_time_eq(expected.as_bytes(), auth.signature.as_bytes()) {
            matched = true;
            break;
        }
    }
    if !matched {
        return Err(Error::new(
            ErrorKind::SignatureDoesNotMatch,
            "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
        ));
    }
    Ok(VerifiedSigV4 {
        access_key: auth.access_key.clone(),
        scope: auth.scope.clone(),
        amz_date: auth.amz_date.clone(),
        seed_signature: auth.signature.clone(),
        signing_key: signing_key.to_vec(),
    })
}

/// Signing keys derived lately on this thread, newest last: a key is the same for every
/// request of one secret, day, region and service, and deriving it is four HMACs.
const SIGNING_KEYS_KEPT: usize = 8;

/// One derived signing key and what it was derived from.
struct DerivedKey {
    secret: String,
    day: u64,
    region: String,
    service: String,
    key: [u8; 32],
}

thread_local! {
    static SIGNING_KEYS: std::cell::RefCell<Vec<DerivedKey>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The SigV4 signing key of `secret` for the day of `signed_at` and `scope`'s region
/// and service: derived once per thread and kept (the last [`SIGNING_KEYS_KEPT`]).
fn signing_key_for(secret: &str, signed_at: SystemTime, scope: &CredentialScope) -> [u8; 32] {
    let day = signed_at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400);
    let found = SIGNING_KEYS.with_borrow(|keys| {
        keys.iter()
            .find(|k| {
                k.day == day
                    && k.secret == secret
                    && k.region == scope.region
                    && k.service == scope.service
            })
            .map(|k| k.key)
    });
    if let Some(key) = found {
        return key;
    }
    let derived = generate_signing_key(secret, signed_at, &scope.region, &scope.service);
    // An HMAC-SHA256 tag is 32 bytes; were it not, the zero key would match no
    // signature, so the request would be refused, never wrongly accepted.
    let key = <[u8; 32]>::try_from(derived.as_ref()).unwrap_or([0; 32]);
    SIGNING_KEYS.with_borrow_mut(|keys| {
        if keys.len() == SIGNING_KEYS_KEPT {
            keys.remove(0);
        }
        keys.push(DerivedKey {
            secret: secret.to_owned(),
            day,
            region: scope.region.clone(),
            service: scope.service.clone(),
            key,
        });
    });
    key
}

fn check_time_window(form: AuthForm, signed_at: SystemTime, now: SystemTime) -> Result<()> {
    let ahead = signed_at.duration_since(now).unwrap_or_default();
    let behind = now.duration_since(signed_at).unwrap_or_default();
    match form {
        AuthForm::Header => {
            if ahead > MAX_CLOCK_SKEW || behind > MAX_CLOCK_SKEW {
                return Err(Error::new(
                    ErrorKind::RequestTimeTooSkewed,
                    "The difference between the request time and the current time is too large.",
                ));
            }
        }
        AuthForm::Presigned { expires } => {
            if ahead > MAX_CLOCK_SKEW {
                return Err(Error::new(
                    ErrorKind::ExpiredRequest,
                    "Request is not valid yet",
                ));
            }
            if behind > expires {
                return Err(Error::new(ErrorKind::ExpiredRequest, "Request has expired"));
            }
        }
    }
    Ok(())
}

/// Compares two byte strings in time independent of where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// An S3 identity to sign outgoing requests with.
#[derive(Clone)]
pub struct S3Credentials {
    /// Access key id.
    pub access_key: String,
    /// Secret access key.
    pub secret_key: String,
    /// Session token of temporary credentials, if any.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Credentials")
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

/// What the signature of an outgoing request covers of its body.
#[derive(Debug, Clone, Copy)]
pub enum SignedBody<'a> {
    /// The whole body, hashed now.
    Bytes(&'a [u8]),
    /// `UNSIGNED-PAYLOAD`.
    Unsigned,
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: an `aws-chunked` body whose trailer carries
    /// its checksum.
    UnsignedTrailer,
}

/// Signs an outgoing S3 request with aws-sigv4 and returns the headers to add
/// (`authorization`, `x-amz-date`, `x-amz-content-sha256`, and the session token).
///
/// `url` is the full URL the request goes to, as it will be sent (its path already
/// percent-encoded); `headers` are the headers it will carry besides these.
///
/// # Errors
/// [`ErrorKind::InternalError`] when aws-sigv4 refuses the request (an invalid URL).
pub fn sign_request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: SignedBody<'_>,
    credentials: &S3Credentials,
    region: &str,
    now: SystemTime,
) -> Result<Vec<(String, String)>> {
    use aws_sigv4::http_request::{
        PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
        UriPathNormalizationMode, sign,
    };
    let identity = aws_credential_types::Credentials::new(
        credentials.access_key.clone(),
        credentials.secret_key.clone(),
        credentials.session_token.clone(),
        None,
        "talon",
    )
    .into();
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("s3")
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| {
            Error::new(ErrorKind::InternalError, "cannot build signing parameters").with_source(e)
        })?
        .into();
    let body = match body {
        SignedBody::Bytes(b) => SignableBody::Bytes(b),
        SignedBody::Unsigned => SignableBody::UnsignedPayload,
        SignedBody::UnsignedTrailer => SignableBody::StreamingUnsignedPayloadTrailer,
    };
    let signable =
        SignableRequest::new(method, url, headers.iter().copied(), body).map_err(|e| {
            Error::new(ErrorKind::InternalError, "cannot sign the request").with_source(e)
        })?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| {
            Error::new(ErrorKind::InternalError, "cannot sign the request").with_source(e)
        })?
        .into_parts();
    let (signed, _params) = instructions.into_parts();
    Ok(signed
        .into_iter()
        .map(|h| (h.name().to_owned(), h.value().to_owned()))
        .collect())
}

/// Builds a presigned URL for `method` on `url` (path already percent-encoded), valid for
/// `expires`, signed with `credentials` for `region`. Used by tests and tools.
///
/// # Errors
/// [`ErrorKind::InvalidArgument`] when `expires` exceeds 7 days or `url` has no host.
pub fn presign_url(
    method: &str,
    url: &str,
    credentials: &S3Credentials,
    region: &str,
    expires: Duration,
    now: SystemTime,
) -> Result<String> {
    if expires.is_zero() || expires > MAX_PRESIGNED_EXPIRY {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "expiry must be between 1 second and 7 days",
        ));
    }
    let (scheme_host, path_and_query) = split_url(url)?;
    let host = scheme_host.split("://").nth(1).unwrap_or(scheme_host);
    let (raw_path, existing_query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let amz_date = format_amz_date(now);
    let scope = CredentialScope {
        date: amz_date[..8].to_owned(),
        region: region.to_owned(),
        service: "s3".to_owned(),
    };
    let mut query = existing_query.to_owned();
    let mut add = |k: &str, v: &str| {
        if !query.is_empty() {
            query.push('&');
        }
        query.push_str(k);
        query.push('=');
        query.push_str(&encode_strict(v));
    };
    add("X-Amz-Algorithm", ALGORITHM);
    add(
        "X-Amz-Credential",
        &format!("{}/{}", credentials.access_key, scope.to_scope_string()),
    );
    add("X-Amz-Date", &amz_date);
    add("X-Amz-Expires", &expires.as_secs().to_string());
    if let Some(token) = &credentials.session_token {
        add("X-Amz-Security-Token", token);
    }
    add("X-Amz-SignedHeaders", "host");
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::HOST,
        host.parse()
            .map_err(|_| Error::new(ErrorKind::InvalidArgument, "invalid host in URL"))?,
    );
    let parts = RequestParts {
        method,
        raw_path,
        raw_query: &query,
        headers: &headers,
    };
    let canonical = canonical_request(
        &parts,
        &["host".to_owned()],
        UNSIGNED_PAYLOAD,
        PathMode::Reencoded,
    )?;
    let sts = string_to_sign(&amz_date, &scope, &canonical);
    let key = generate_signing_key(&credentials.secret_key, now, region, "s3");
    let signature = calculate_signature(key.as_ref(), sts.as_bytes());
    Ok(format!(
        "{scheme_host}{raw_path}?{query}&X-Amz-Signature={signature}"
    ))
}

fn split_url(url: &str) -> Result<(&str, &str)> {
    let after_scheme = url
        .find("://")
        .map(|i| i + 3)
        .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "URL has no scheme"))?;
    let path_start = url[after_scheme..]
        .find('/')
        .map(|i| i + after_scheme)
        .unwrap_or(url.len());
    let (a, b) = url.split_at(path_start);
    Ok((a, if b.is_empty() { "/" } else { b }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    const AK: &str = "AKIAIOSFODNN7EXAMPLE";
    const SK: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

    fn at_example_time() -> SystemTime {
        parse_amz_date("20130524T000000Z").expect("valid date")
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                v.parse().expect("value"),
            );
        }
        h
    }

    /// The "GET Object" example of the S3 SigV4 documentation.
    #[test]
    fn verifies_the_documented_get_object_example() {
        let h = headers(&[
            ("host", "examplebucket.s3.amazonaws.com"),
            ("range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY_SHA256),
            ("x-amz-date", "20130524T000000Z"),
            (
                "authorization",
                "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
            ),
        ]);
        let parts = RequestParts {
            method: "GET",
            raw_path: "/test.txt",
            raw_query: "",
            headers: &h,
        };
        let auth = parse_authorization(&h, "")
            .expect("parse")
            .expect("present");
        assert_eq!(auth.access_key, AK);
        verify(&parts, &auth, SK, at_example_time()).expect("documented example verifies");
        assert_eq!(
            verify(&parts, &auth, "wrong", at_example_time())
                .map(|_| ())
                .map_err(|e| e.kind()),
            Err(ErrorKind::SignatureDoesNotMatch)
        );
        let late = at_example_time() + Duration::from_secs(16 * 60);
        assert_eq!(
            verify(&parts, &auth, SK, late)
                .map(|_| ())
                .map_err(|e| e.kind()),
            Err(ErrorKind::RequestTimeTooSkewed)
        );
    }

    /// The presigned-URL example of the S3 SigV4 documentation.
    #[test]
    fn verifies_the_documented_presigned_example() {
        let query = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
        let h = headers(&[("host", "examplebucket.s3.amazonaws.com")]);
        let parts = RequestParts {
            method: "GET",
            raw_path: "/test.txt",
            raw_query: query,
            headers: &h,
        };
        let auth = parse_authorization(&h, query)
            .expect("parse")
            .expect("present");
        assert_eq!(
            auth.form,
            AuthForm::Presigned {
                expires: Duration::from_secs(86400)
            }
        );
        let inside = at_example_time() + Duration::from_secs(3600);
        verify(&parts, &auth, SK, inside).expect("valid within its day");
        let after = at_example_time() + Duration::from_secs(86401);
        assert_eq!(
            verify(&parts, &auth, SK, after)
                .map(|_| ())
                .map_err(|e| e.kind()),
            Err(ErrorKind::ExpiredRequest)
        );
        // Tampering with any signed part breaks the signature.
        let parts = RequestParts {
            raw_path: "/test2.txt",
            ..parts
        };
        assert_eq!(
            verify(&parts, &auth, SK, inside)
                .map(|_| ())
                .map_err(|e| e.kind()),
            Err(ErrorKind::SignatureDoesNotMatch)
        );
    }

    #[test]
    fn what_aws_sigv4_signs_we_verify() {
        let creds = S3Credentials {
            access_key: AK.into(),
            secret_key: SK.into(),
            session_token: None,
        };
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let url = "http://127.0.0.1:9000/bucket/dir/a%20b%2Bc%C3%A4.txt?list-type=2&prefix=a%2Fb&delimiter=%2F";
        let body = b"hello";
        let extra = [("host", "127.0.0.1:9000"), ("content-type", "text/plain")];
        let signed = sign_request(
            "PUT",
            url,
            &extra,
            SignedBody::Bytes(body),
            &creds,
            "eu-west-1",
            now,
        )
        .expect("sign");
        let mut all: Vec<(&str, &str)> = extra.to_vec();
        all.extend(signed.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let h = headers(&all);
        let (path, query) = url["http://127.0.0.1:9000".len()..]
            .split_once('?')
            .expect("query");
        let parts = RequestParts {
            method: "PUT",
            raw_path: path,
            raw_query: query,
            headers: &h,
        };
        let auth = parse_authorization(&h, query)
            .expect("parse")
            .expect("present");
        let verified =
            verify(&parts, &auth, SK, now).expect("our verifier accepts aws-sigv4's signature");
        assert_eq!(verified.scope.region, "eu-west-1");
        assert_eq!(
            PayloadMode::parse(payload_hash_of(&parts, &auth).expect("hash")).expect("mode"),
            PayloadMode::Sha256(hex::encode(Sha256::digest(body)))
        );
    }

    /// A GET signed by aws-sigv4 with `secret` for `region` at `now`, verified with
    /// `verify_secret`.
    fn verify_signed_get(
        secret: &str,
        region: &str,
        now: SystemTime,
        verify_secret: &str,
    ) -> Result<VerifiedSigV4> {
        let creds = S3Credentials {
            access_key: AK.into(),
            secret_key: secret.into(),
            session_token: None,
        };
        let url = "http://127.0.0.1:9000/bucket/key.bin";
        let extra = [("host", "127.0.0.1:9000"), ("range", "bytes=0-  9")];
        let signed = sign_request(
            "GET",
            url,
            &extra,
            SignedBody::Bytes(b""),
            &creds,
            region,
            now,
        )
        .expect("sign");
        let mut all: Vec<(&str, &str)> = extra.to_vec();
        all.extend(signed.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let h = headers(&all);
        let parts = RequestParts {
            method: "GET",
            raw_path: "/bucket/key.bin",
            raw_query: "",
            headers: &h,
        };
        let auth = parse_authorization(&h, "")
            .expect("parse")
            .expect("present");
        verify(&parts, &auth, verify_secret, now)
    }

    #[test]
    fn a_signing_key_kept_for_one_secret_day_and_region_serves_no_other() {
        let day = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let next_day = day + Duration::from_secs(86_400);
        // Each verified first, so its key is kept on this thread...
        verify_signed_get(SK, "eu-west-1", day, SK).expect("the right secret");
        // ...and a request signed otherwise is still checked against its own key.
        let wrong = verify_signed_get("another-secret", "eu-west-1", day, SK)
            .expect_err("a signature of another secret");
        assert_eq!(wrong.kind(), ErrorKind::SignatureDoesNotMatch);
        let wrong = verify_signed_get(SK, "eu-west-1", day, "another-secret")
            .expect_err("verified with another secret");
        assert_eq!(wrong.kind(), ErrorKind::SignatureDoesNotMatch);
        verify_signed_get(SK, "us-east-2", day, SK).expect("another region, its own key");
        verify_signed_get(SK, "eu-west-1", next_day, SK).expect("the next day, its own key");
        // More keys than are kept: the first is derived again, still right.
        for i in 0..SIGNING_KEYS_KEPT as u64 + 2 {
            let later = day + Duration::from_secs(86_400 * (2 + i));
            verify_signed_get(SK, "eu-west-1", later, SK).expect("a later day");
        }
        verify_signed_get(SK, "eu-west-1", day, SK).expect("the first day again");
    }

    #[test]
    fn presigned_urls_we_make_verify_and_expire() {
        let creds = S3Credentials {
            access_key: AK.into(),
            secret_key: SK.into(),
            session_token: None,
        };
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let url = presign_url(
            "GET",
            "http://localhost:9000/b/k%20x",
            &creds,
            "us-east-1",
            Duration::from_secs(60),
            now,
        )
        .expect("presign");
        let rest = url.strip_prefix("http://localhost:9000").expect("prefix");
        let (path, query) = rest.split_once('?').expect("query");
        let h = headers(&[("host", "localhost:9000")]);
        let parts = RequestParts {
            method: "GET",
            raw_path: path,
            raw_query: query,
            headers: &h,
        };
        let auth = parse_authorization(&h, query)
            .expect("parse")
            .expect("present");
        verify(&parts, &auth, SK, now + Duration::from_secs(59)).expect("valid");
        assert!(verify(&parts, &auth, SK, now + Duration::from_secs(61)).is_err());
    }

    #[test]
    fn presign_reproduces_the_documented_url() {
        let creds = S3Credentials {
            access_key: AK.into(),
            secret_key: SK.into(),
            session_token: None,
        };
        let url = presign_url(
            "GET",
            "https://examplebucket.s3.amazonaws.com/test.txt",
            &creds,
            "us-east-1",
            Duration::from_secs(86400),
            at_example_time(),
        )
        .expect("presign");
        assert!(
            url.ends_with(
                "X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
            ),
            "{url}"
        );
    }

    #[test]
    fn malformed_authorizations_are_rejected_with_a_kind() {
        let cases = [
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request,SignedHeaders=host",
            "AWS4-HMAC-SHA256 Credential=AK/2013/us-east-1/s3/aws4_request,SignedHeaders=host,Signature=00",
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3,SignedHeaders=host,Signature=00",
        ];
        for c in cases {
            let h = headers(&[("authorization", c), ("x-amz-date", "20130524T000000Z")]);
            assert_eq!(
                parse_authorization(&h, "").map_err(|e| e.kind()).err(),
                Some(ErrorKind::MalformedAuthorization),
                "{c}"
            );
        }
        // A signature of the wrong shape is a signature that does not match, as S3 says.
        let h = headers(&[
            (
                "authorization",
                "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request,SignedHeaders=host,Signature=00",
            ),
            ("x-amz-date", "20130524T000000Z"),
        ]);
        assert_eq!(
            parse_authorization(&h, "").map_err(|e| e.kind()).err(),
            Some(ErrorKind::SignatureDoesNotMatch)
        );
        let h = headers(&[("authorization", "AWS AK:sig")]);
        assert_eq!(
            parse_authorization(&h, "").map_err(|e| e.kind()).err(),
            Some(ErrorKind::NotImplemented)
        );
        assert!(
            parse_authorization(&HeaderMap::new(), "a=b")
                .expect("anonymous")
                .is_none()
        );
    }

    #[test]
    fn payload_modes() {
        assert_eq!(
            PayloadMode::parse("UNSIGNED-PAYLOAD").ok(),
            Some(PayloadMode::Unsigned)
        );
        assert!(
            PayloadMode::parse("STREAMING-UNSIGNED-PAYLOAD-TRAILER")
                .expect("mode")
                .is_chunked()
        );
        assert!(PayloadMode::parse("abc").is_err());
    }
}
