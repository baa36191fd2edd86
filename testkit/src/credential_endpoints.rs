//! Stand-ins for the endpoints a pod or an instance gets its AWS credentials from, in
//! their documented wire formats, and an S3 origin that refuses expired ones.
//!
//! - [`CredentialEndpoints`]: one HTTP server speaking IMDSv2 (`PUT /latest/api/token`
//!   with `x-aws-ec2-metadata-token-ttl-seconds`, then
//!   `/latest/meta-data/iam/security-credentials/` and the role's JSON, each with
//!   `x-aws-ec2-metadata-token`) and the container endpoint (`GET /container/creds`
//!   with the `Authorization` token). Every answer issues new keys that expire after
//!   the lifetime given.
//! - The same server speaks Entra ID's token endpoint (`POST /{tenant}/oauth2/v2.0/token`,
//!   `client_credentials` with a `client_secret` or a `client_assertion`) and a managed
//!   identity endpoint (`GET /msi/token` with `X-IDENTITY-HEADER`, as App Service's
//!   `IDENTITY_ENDPOINT`), each issuing a bearer token that expires after the lifetime.
//! - [`ExpiringOrigin`]: an HTTP proxy in front of an anonymous origin (the stub) that
//!   verifies each request's SigV4 signature with the secret issued for its access key
//!   (`talon_protocols::s3::auth`, the fronts' verifier) and its `x-amz-security-token`,
//!   and answers `400 ExpiredToken` once the keys expired — what S3 does with temporary
//!   credentials; or, for Azure, takes only an issued bearer token and answers `401
//!   InvalidAuthenticationInfo` once it expired. Requests it accepts are forwarded
//!   unsigned.
//!
//! Real AWS endpoints cannot be reached from here, and moto's STS issues keys that its
//! S3 never expires, so this is the origin the expiry tests run against.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use talon_protocols::s3::auth::S3Identities;
use talon_protocols::s3::request::{S3Addressing, S3Request};
use talon_protocols::s3::sigv4::RequestParts;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Keys issued so far: access key → (secret, session token, expiry); bearer tokens →
/// expiry.
#[derive(Debug, Default)]
struct Issued {
    keys: BTreeMap<String, (String, String, SystemTime)>,
    tokens: BTreeMap<String, SystemTime>,
    serial: u64,
}

/// Issues short-lived keys and remembers them.
#[derive(Debug, Clone)]
pub struct Issuer {
    lifetime: Duration,
    issued: Arc<Mutex<Issued>>,
}

impl Issuer {
    /// Keys that expire `lifetime` after they are issued.
    pub fn new(lifetime: Duration) -> Issuer {
        Issuer {
            lifetime,
            issued: Arc::new(Mutex::new(Issued::default())),
        }
    }

    fn issue(&self) -> (String, String, String, SystemTime) {
        let mut issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        issued.serial += 1;
        let n = issued.serial;
        let key = format!("ASIATALONTEST{n:07}");
        let secret = format!("secret-{n}-{}", fastrand_like(n));
        let token = format!("token-{n}");
        let expires = SystemTime::now() + self.lifetime;
        issued
            .keys
            .insert(key.clone(), (secret.clone(), token.clone(), expires));
        (key, secret, token, expires)
    }

    fn issue_token(&self) -> (String, SystemTime) {
        let mut issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        issued.serial += 1;
        let token = format!(
            "eyJ0eXAiOiJKV1QifQ.bearer-{}-{}",
            issued.serial,
            fastrand_like(issued.serial)
        );
        let expires = SystemTime::now() + self.lifetime;
        issued.tokens.insert(token.clone(), expires);
        (token, expires)
    }

    fn token_expiry(&self, token: &str) -> Option<SystemTime> {
        self.issued
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tokens
            .get(token)
            .copied()
    }

    /// How many keys or tokens were issued.
    pub fn issued(&self) -> u64 {
        self.issued.lock().unwrap_or_else(|p| p.into_inner()).serial
    }

    fn lookup(&self, key: &str) -> Option<(String, String, SystemTime)> {
        self.issued
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys
            .get(key)
            .cloned()
    }
}

/// Not a secret generator, only something unguessable enough for a test.
fn fastrand_like(n: u64) -> u64 {
    let t = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    t.rotate_left(17) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn rfc3339(t: SystemTime) -> String {
    time::OffsetDateTime::from(t)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// One HTTP/1.1 request read whole from a socket (tests only: small bodies).
struct Raw {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

async fn read_request(s: &mut TcpStream) -> Option<Raw> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let target = first.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Raw {
        method,
        target,
        headers,
        body,
    })
}

async fn respond(s: &mut TcpStream, status: u16, headers: &[(String, String)], body: &[u8]) {
    let mut head = format!(
        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        if k != "content-length" && k != "connection" && k != "transfer-encoding" {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str("\r\n");
    let _ = s.write_all(head.as_bytes()).await;
    let _ = s.write_all(body).await;
    let _ = s.shutdown().await;
}

async fn serve<F, Fut>(listener: TcpListener, handle: F)
where
    F: Fn(Raw) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = (u16, Vec<(String, String)>, Vec<u8>)> + Send,
{
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            if let Some(req) = read_request(&mut s).await {
                let (status, headers, body) = handle(req).await;
                respond(&mut s, status, &headers, &body).await;
            }
        });
    }
}

/// The IMDSv2 and container credential endpoints.
#[derive(Debug)]
pub struct CredentialEndpoints {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

/// The `X-IDENTITY-HEADER` the managed identity endpoint takes.
pub const IDENTITY_HEADER: &str = "identity-header-secret";
/// The client secret the Entra ID token endpoint takes.
pub const CLIENT_SECRET: &str = "client-secret-value";
/// The federated token (AKS's projected service account token) it takes.
pub const FEDERATED_TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.federated.sig";

/// The IMDS role name the stand-in reports.
pub const ROLE: &str = "talon-test-role";
/// The container endpoint's `Authorization` token.
pub const CONTAINER_TOKEN: &str = "container-auth-token";

impl CredentialEndpoints {
    /// Starts them on a free loopback port.
    pub async fn start(issuer: Issuer) -> CredentialEndpoints {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let session = "imds-session-token".to_owned();
        let task = tokio::spawn(serve(listener, move |req: Raw| {
            let issuer = issuer.clone();
            let session = session.clone();
            async move {
                let header = |name: &str| {
                    req.headers
                        .iter()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.as_str())
                };
                let json = |issuer: &Issuer| {
                    let (key, secret, token, expires) = issuer.issue();
                    let body = serde_json::json!({
                        "Code": "Success",
                        "AccessKeyId": key,
                        "SecretAccessKey": secret,
                        "Token": token,
                        "Expiration": rfc3339(expires),
                    });
                    (
                        200,
                        vec![("content-type".to_owned(), "application/json".to_owned())],
                        body.to_string().into_bytes(),
                    )
                };
                let creds_prefix = "/latest/meta-data/iam/security-credentials/";
                match (req.method.as_str(), req.target.as_str()) {
                    ("PUT", "/latest/api/token") => {
                        match header("x-aws-ec2-metadata-token-ttl-seconds") {
                            Some(_) => (200, Vec::new(), session.into_bytes()),
                            None => (400, Vec::new(), Vec::new()),
                        }
                    }
                    ("GET", path) if path.starts_with(creds_prefix) => {
                        if header("x-aws-ec2-metadata-token") != Some(session.as_str()) {
                            return (401, Vec::new(), Vec::new());
                        }
                        match &path[creds_prefix.len()..] {
                            "" => (200, Vec::new(), ROLE.as_bytes().to_vec()),
                            role if role == ROLE => json(&issuer),
                            _ => (404, Vec::new(), Vec::new()),
                        }
                    }
                    ("GET", "/container/creds") => {
                        if header("authorization") != Some(CONTAINER_TOKEN) {
                            return (401, Vec::new(), Vec::new());
                        }
                        json(&issuer)
                    }
                    ("GET", path) if path.starts_with("/msi/token?") => {
                        let storage = path.contains("resource=https%3A%2F%2Fstorage.azure.com%2F");
                        if header("x-identity-header") != Some(IDENTITY_HEADER) || !storage {
                            return (400, Vec::new(), b"{\"error\":\"invalid_request\"}".to_vec());
                        }
                        let (token, expires) = issuer.issue_token();
                        let on = expires
                            .duration_since(SystemTime::UNIX_EPOCH)
                            .unwrap_or_default()
                            .as_secs();
                        let body = serde_json::json!({
                            "access_token": token,
                            "expires_on": on.to_string(),
                            "resource": "https://storage.azure.com/",
                            "token_type": "Bearer",
                        });
                        (200, Vec::new(), body.to_string().into_bytes())
                    }
                    ("POST", path) if path.ends_with("/oauth2/v2.0/token") => {
                        let form: BTreeMap<String, String> =
                            talon_protocols::uri_encoding::parse_query(&String::from_utf8_lossy(
                                &req.body,
                            ))
                            .into_iter()
                            .collect();
                        let field = |k: &str| form.get(k).map(String::as_str);
                        let proven = field("client_secret") == Some(CLIENT_SECRET)
                            || (field("client_assertion") == Some(FEDERATED_TOKEN)
                                && field("client_assertion_type")
                                    == Some(
                                        "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                                    ));
                        if field("grant_type") != Some("client_credentials")
                            || field("scope") != Some("https://storage.azure.com/.default")
                            || !proven
                        {
                            return (401, Vec::new(), b"{\"error\":\"invalid_client\"}".to_vec());
                        }
                        let (token, _) = issuer.issue_token();
                        let body = serde_json::json!({
                            "token_type": "Bearer",
                            "expires_in": issuer.lifetime.as_secs(),
                            "access_token": token,
                        });
                        (200, Vec::new(), body.to_string().into_bytes())
                    }
                    _ => (404, Vec::new(), Vec::new()),
                }
            }
        }));
        CredentialEndpoints { addr, task }
    }

    /// `http://addr`: what `AWS_EC2_METADATA_SERVICE_ENDPOINT` names.
    pub fn imds_endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What `AWS_CONTAINER_CREDENTIALS_FULL_URI` names.
    pub fn container_uri(&self) -> String {
        format!("http://{}/container/creds", self.addr)
    }

    /// What `IDENTITY_ENDPOINT` names.
    pub fn identity_endpoint(&self) -> String {
        format!("http://{}/msi/token", self.addr)
    }

    /// What `AZURE_AUTHORITY_HOST` names.
    pub fn authority(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for CredentialEndpoints {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the expiring origin did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OriginCounts {
    /// Requests accepted and forwarded, by access key.
    pub accepted: BTreeMap<String, u64>,
    /// Requests refused because their keys had expired.
    pub expired: u64,
    /// Requests refused for another reason (unsigned, unknown key, bad signature or
    /// token).
    pub refused: u64,
}

/// Which credentials an [`ExpiringOrigin`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// S3: SigV4 with issued keys and their session token.
    S3,
    /// Azure Blob: an issued bearer token.
    AzureBearer,
}

/// An origin that takes only the issued credentials, and only until they expire.
#[derive(Debug)]
pub struct ExpiringOrigin {
    addr: SocketAddr,
    counts: Arc<Mutex<OriginCounts>>,
    task: tokio::task::JoinHandle<()>,
}

fn s3_error(status: u16, code: &str, message: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
    );
    (
        status,
        vec![("content-type".into(), "application/xml".into())],
        body.into_bytes(),
    )
}

impl ExpiringOrigin {
    /// Starts it in front of `target` (`http://host:port`, an anonymous S3 origin).
    pub async fn start(issuer: Issuer, target: String) -> ExpiringOrigin {
        ExpiringOrigin::start_for(Protocol::S3, issuer, target).await
    }

    /// Starts it for `protocol` in front of `target` (an anonymous origin of it; for
    /// Azure, `http://host:port`, the account in the path).
    pub async fn start_for(protocol: Protocol, issuer: Issuer, target: String) -> ExpiringOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let counts = Arc::new(Mutex::new(OriginCounts::default()));
        let http = reqwest::Client::new();
        let shared = counts.clone();
        let task = tokio::spawn(serve(listener, move |req: Raw| {
            let issuer = issuer.clone();
            let counts = shared.clone();
            let http = http.clone();
            let target = target.clone();
            async move {
                let count = |f: &dyn Fn(&mut OriginCounts)| {
                    f(&mut counts.lock().unwrap_or_else(|p| p.into_inner()))
                };
                let checked = match protocol {
                    Protocol::S3 => check(&issuer, &req),
                    Protocol::AzureBearer => check_bearer(&issuer, &req),
                };
                match checked {
                    Ok(key) => count(&|c| *c.accepted.entry(key.clone()).or_default() += 1),
                    Err((expired, answer)) => {
                        count(&|c| {
                            if expired {
                                c.expired += 1
                            } else {
                                c.refused += 1
                            }
                        });
                        return answer;
                    }
                }
                let method = reqwest::Method::from_bytes(req.method.as_bytes())
                    .unwrap_or(reqwest::Method::GET);
                let mut forward = http.request(method, format!("{target}{}", req.target));
                for (k, v) in &req.headers {
                    if !matches!(
                        k.as_str(),
                        "host" | "authorization" | "content-length" | "connection"
                    ) && !k.starts_with("x-amz-security-token")
                    {
                        forward = forward.header(k.as_str(), v.as_str());
                    }
                }
                let answer = forward.body(Bytes::from(req.body)).send().await;
                match answer {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let headers: Vec<(String, String)> = r
                            .headers()
                            .iter()
                            .filter_map(|(k, v)| {
                                Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned()))
                            })
                            .collect();
                        let body = r.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
                        (status, headers, body)
                    }
                    Err(_) => s3_error(502, "InternalError", "the origin behind the proxy failed"),
                }
            }
        }));
        ExpiringOrigin { addr, counts, task }
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What it did so far.
    pub fn counts(&self) -> OriginCounts {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for ExpiringOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Refusal = (bool, (u16, Vec<(String, String)>, Vec<u8>));

/// The bearer token if it was issued and has not expired; else whether it had expired,
/// and Azure's answer.
fn check_bearer(issuer: &Issuer, req: &Raw) -> Result<String, Refusal> {
    let azure_error = |status: u16, code: &str, detail: &str| {
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>{code}</Code><Message>Server failed to authenticate the request.</Message><AuthenticationErrorDetail>{detail}</AuthenticationErrorDetail></Error>"
        );
        (
            status,
            vec![("content-type".to_owned(), "application/xml".to_owned())],
            body.into_bytes(),
        )
    };
    let token = req
        .headers
        .iter()
        .find(|(k, _)| k == "authorization")
        .and_then(|(_, v)| v.strip_prefix("Bearer "))
        .map(str::to_owned)
        .ok_or_else(|| {
            (
                false,
                azure_error(401, "NoAuthenticationInformation", "no bearer token"),
            )
        })?;
    let expires = issuer.token_expiry(&token).ok_or_else(|| {
        (
            false,
            azure_error(
                401,
                "InvalidAuthenticationInfo",
                "Signature validation failed.",
            ),
        )
    })?;
    if SystemTime::now() >= expires {
        return Err((
            true,
            azure_error(
                401,
                "InvalidAuthenticationInfo",
                "Lifetime validation failed. The token is expired.",
            ),
        ));
    }
    Ok(token.chars().take(40).collect())
}

/// The request's access key if its signature and token are those of unexpired issued
/// keys; else whether they had expired, and S3's answer.
fn check(issuer: &Issuer, req: &Raw) -> Result<String, Refusal> {
    let refused = |code: &str, message: &str| (false, s3_error(403, code, message));
    let auth = req
        .headers
        .iter()
        .find(|(k, _)| k == "authorization")
        .map(|(_, v)| v.clone())
        .ok_or_else(|| refused("AccessDenied", "Anonymous access is not allowed"))?;
    let key = auth
        .split("Credential=")
        .nth(1)
        .and_then(|c| c.split('/').next())
        .unwrap_or_default()
        .to_owned();
    let (secret, token, expires) = issuer.lookup(&key).ok_or_else(|| {
        refused(
            "InvalidAccessKeyId",
            "The AWS Access Key Id you provided does not exist in our records.",
        )
    })?;
    let sent_token = req
        .headers
        .iter()
        .find(|(k, _)| k == "x-amz-security-token")
        .map(|(_, v)| v.as_str());
    if sent_token != Some(token.as_str()) {
        return Err(refused(
            "InvalidToken",
            "The provided token is malformed or otherwise invalid.",
        ));
    }
    if SystemTime::now() >= expires {
        return Err((
            true,
            s3_error(400, "ExpiredToken", "The provided token has expired."),
        ));
    }
    let mut headers = http::HeaderMap::new();
    for (k, v) in &req.headers {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(k.as_bytes()),
            http::HeaderValue::from_str(v),
        ) {
            headers.append(name, value);
        }
    }
    let (path, query) = req.target.split_once('?').unwrap_or((&req.target, ""));
    let method = http::Method::from_bytes(req.method.as_bytes())
        .map_err(|_| refused("InvalidRequest", "method"))?;
    let addressing = S3Addressing::PathStyle;
    let request = S3Request::classify(&method, &addressing, &headers, path, query)
        .map_err(|e| refused("InvalidRequest", e.message()))?;
    let identities = S3Identities {
        regions: vec!["us-east-1".into()],
        ..S3Identities::default()
    }
    .with_unrestricted_key(&key, &secret);
    let parts = RequestParts {
        method: method.as_str(),
        raw_path: path,
        raw_query: query,
        headers: &headers,
    };
    talon_protocols::s3::auth::verify(&identities, None, &request, &parts, SystemTime::now())
        .map_err(|e| refused("SignatureDoesNotMatch", e.message()))?;
    Ok(key)
}
