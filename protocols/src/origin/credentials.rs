//! The S3 origin's credentials as real deployments hand them to a process, refreshed
//! before they expire: AWS's default chain (environment, web identity, container,
//! IMDSv2) resolved once at start, then kept current by a task of its own.
//!
//! Written by hand rather than taken from `aws-config`: that crate adds 35 crates to
//! this tree (a second TLS and HTTP stack with `aws-lc-sys`'s C build, and the STS, SSO
//! and SSO-OIDC clients), 2 min 1 s of release build on the project's 2-core host per
//! profile, for four small documented exchanges. What each source speaks:
//!
//! | source | when | exchange |
//! |---|---|---|
//! | environment | `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`) | none; never refreshed |
//! | profile | `AWS_PROFILE` (or `default`) in `~/.aws/credentials` / `~/.aws/config` (`AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`) | its static keys, or its `role_arn` with `web_identity_token_file` as web identity; `credential_process` and SSO profiles are refused, not ignored |
//! | web identity (EKS IRSA) | `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN` | STS `AssumeRoleWithWebIdentity`, unsigned, with the file's token read again each time |
//! | container (ECS, EKS Pod Identity) | `AWS_CONTAINER_CREDENTIALS_FULL_URI` or `_RELATIVE_URI` | `GET` with `AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE)`, JSON |
//! | instance profile (EC2) | last, unless `AWS_EC2_METADATA_DISABLED=true` | IMDSv2: `PUT /latest/api/token`, then the role's JSON with that token |
//!
//! Refresh (the reference Talon's rule): at 80% of a credential's lifetime (48 minutes
//! into STS's default hour); a refresh that fails keeps the last good credentials, logs,
//! counts and tries again (after 5 s, doubling to a minute) until they expire; after
//! that a request fails with a clear error rather than go out unsigned or expired.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use crate::error::{Error, ErrorKind, Result};
use crate::s3::sigv4::S3Credentials;

/// Credentials (S3 keys, an Azure token or SAS) and when they stop being valid
/// (`None`: never).
#[derive(Clone)]
pub struct Fetched<T> {
    /// The credentials.
    pub value: T,
    /// Their expiry.
    pub expires: Option<SystemTime>,
}

/// The boxed future a source's fetch returns.
pub type FetchFuture<'a, T> = Pin<Box<dyn Future<Output = Result<Fetched<T>>> + Send + 'a>>;

/// Where credentials of kind `T` come from.
pub trait Source<T>: Send + Sync + 'static {
    /// What it is, for logs and errors (no secret).
    fn describe(&self) -> String;
    /// Fetches credentials now.
    fn fetch<'a>(&'a self, http: &'a reqwest::Client) -> FetchFuture<'a, T>;
}

pub(super) fn unavailable(what: &str, why: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::ServiceUnavailable,
        format!("origin credentials from {what}: {why}"),
    )
}

/// Keys that never change (the environment's, or flags').
pub struct StaticSource(pub S3Credentials);

impl Source<S3Credentials> for StaticSource {
    fn describe(&self) -> String {
        "static keys".into()
    }
    fn fetch<'a>(&'a self, _: &'a reqwest::Client) -> FetchFuture<'a, S3Credentials> {
        let fetched = Fetched {
            value: self.0.clone(),
            expires: None,
        };
        Box::pin(async move { Ok(fetched) })
    }
}

/// STS `AssumeRoleWithWebIdentity` with a token file (EKS IAM roles for service
/// accounts): the kubelet rotates the file, so it is read again for every exchange.
pub struct WebIdentitySource {
    /// STS endpoint (`https://sts.<region>.amazonaws.com`, or `AWS_ENDPOINT_URL_STS`).
    pub sts_endpoint: String,
    /// The role to assume.
    pub role_arn: String,
    /// The session's name.
    pub session_name: String,
    /// The file holding the OIDC token.
    pub token_file: std::path::PathBuf,
    /// Asked lifetime, seconds (`None`: STS's default, one hour).
    pub duration_seconds: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StsResponse {
    assume_role_with_web_identity_result: StsResult,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StsResult {
    credentials: StsCredentials,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StsCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: String,
    expiration: String,
}

pub(super) fn rfc3339(what: &str, text: &str) -> Result<SystemTime> {
    time::OffsetDateTime::parse(text.trim(), &time::format_description::well_known::Rfc3339)
        .map(SystemTime::from)
        .map_err(|e| unavailable(what, format!("expiry '{text}' is not a date: {e}")))
}

impl Source<S3Credentials> for WebIdentitySource {
    fn describe(&self) -> String {
        format!(
            "web identity (role {}, STS {})",
            self.role_arn, self.sts_endpoint
        )
    }

    fn fetch<'a>(&'a self, http: &'a reqwest::Client) -> FetchFuture<'a, S3Credentials> {
        Box::pin(async move {
            let what = self.describe();
            let token = std::fs::read_to_string(&self.token_file).map_err(|e| {
                unavailable(&what, format!("reading {}: {e}", self.token_file.display()))
            })?;
            let mut form = vec![
                ("Action", "AssumeRoleWithWebIdentity".to_owned()),
                ("Version", "2011-06-15".to_owned()),
                ("RoleArn", self.role_arn.clone()),
                ("RoleSessionName", self.session_name.clone()),
                ("WebIdentityToken", token.trim().to_owned()),
            ];
            if let Some(d) = self.duration_seconds {
                form.push(("DurationSeconds", d.to_string()));
            }
            let body = form
                .iter()
                .map(|(k, v)| format!("{k}={}", crate::uri_encoding::encode_strict(v)))
                .collect::<Vec<_>>()
                .join("&");
            let response = http
                .post(&self.sts_endpoint)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body)
                .send()
                .await
                .map_err(|e| unavailable(&what, e))?;
            let status = response.status();
            let text = response.text().await.map_err(|e| unavailable(&what, e))?;
            if !status.is_success() {
                return Err(unavailable(
                    &what,
                    format!("STS answered {status}: {}", first_line(&text)),
                ));
            }
            let parsed: StsResponse = crate::s3::xml::parse_request(text.as_bytes())
                .map_err(|e| unavailable(&what, format!("unreadable STS answer: {e}")))?;
            let c = parsed.assume_role_with_web_identity_result.credentials;
            Ok(Fetched {
                expires: Some(rfc3339(&what, &c.expiration)?),
                value: S3Credentials {
                    access_key: c.access_key_id,
                    secret_key: c.secret_access_key,
                    session_token: Some(c.session_token),
                },
            })
        })
    }
}

/// The first line of an endpoint's answer, at most 200 characters, for an error.
fn first_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect()
}

/// The JSON the container endpoint and IMDS answer.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct JsonCredentials {
    access_key_id: String,
    secret_access_key: String,
    token: Option<String>,
    expiration: Option<String>,
}

impl JsonCredentials {
    fn into_fetched(self, what: &str) -> Result<Fetched<S3Credentials>> {
        Ok(Fetched {
            expires: self
                .expiration
                .as_deref()
                .map(|e| rfc3339(what, e))
                .transpose()?,
            value: S3Credentials {
                access_key: self.access_key_id,
                secret_key: self.secret_access_key,
                session_token: self.token,
            },
        })
    }
}

/// Sends `request` to a credential endpoint and reads its JSON answer.
///
/// # Errors
/// [`ErrorKind::ServiceUnavailable`] naming `what`: no answer, a status other than
/// success (with the answer's first line), or JSON that is not a `T`.
pub(super) async fn json_answer<T: serde::de::DeserializeOwned>(
    what: &str,
    request: reqwest::RequestBuilder,
) -> Result<T> {
    let response = request.send().await.map_err(|e| unavailable(what, e))?;
    let status = response.status();
    let text = response.text().await.map_err(|e| unavailable(what, e))?;
    if !status.is_success() {
        return Err(unavailable(
            what,
            format!("answered {status}: {}", first_line(&text)),
        ));
    }
    serde_json::from_str(&text).map_err(|e| unavailable(what, format!("unreadable answer: {e}")))
}

async fn json_credentials(
    what: &str,
    request: reqwest::RequestBuilder,
) -> Result<Fetched<S3Credentials>> {
    json_answer::<JsonCredentials>(what, request)
        .await?
        .into_fetched(what)
}

/// The container credentials endpoint (ECS task roles, EKS Pod Identity).
pub struct ContainerSource {
    /// The full URL.
    pub url: String,
    /// `Authorization` value, given directly.
    pub token: Option<String>,
    /// A file holding it, read again for every exchange (EKS Pod Identity rotates it).
    pub token_file: Option<std::path::PathBuf>,
}

impl Source<S3Credentials> for ContainerSource {
    fn describe(&self) -> String {
        format!("the container endpoint {}", self.url)
    }

    fn fetch<'a>(&'a self, http: &'a reqwest::Client) -> FetchFuture<'a, S3Credentials> {
        Box::pin(async move {
            let what = self.describe();
            let mut request = http.get(&self.url);
            let token = match &self.token_file {
                Some(f) => Some(
                    std::fs::read_to_string(f)
                        .map_err(|e| unavailable(&what, format!("reading {}: {e}", f.display())))?
                        .trim()
                        .to_owned(),
                ),
                None => self.token.clone(),
            };
            if let Some(t) = token {
                request = request.header("authorization", t);
            }
            json_credentials(&what, request).await
        })
    }
}

/// The EC2 instance metadata service, version 2 (a session token first).
pub struct ImdsSource {
    /// `http://169.254.169.254` unless `AWS_EC2_METADATA_SERVICE_ENDPOINT` says otherwise.
    pub endpoint: String,
}

impl Source<S3Credentials> for ImdsSource {
    fn describe(&self) -> String {
        format!(
            "the instance metadata service (IMDSv2) at {}",
            self.endpoint
        )
    }

    fn fetch<'a>(&'a self, http: &'a reqwest::Client) -> FetchFuture<'a, S3Credentials> {
        Box::pin(async move {
            let what = self.describe();
            let base = self.endpoint.trim_end_matches('/');
            let timeout = Duration::from_secs(2);
            let token = http
                .put(format!("{base}/latest/api/token"))
                .header("x-aws-ec2-metadata-token-ttl-seconds", "21600")
                .timeout(timeout)
                .send()
                .await
                .map_err(|e| unavailable(&what, e))?;
            if !token.status().is_success() {
                return Err(unavailable(
                    &what,
                    format!("the token request answered {}", token.status()),
                ));
            }
            let token = token.text().await.map_err(|e| unavailable(&what, e))?;
            let roles_url = format!("{base}/latest/meta-data/iam/security-credentials/");
            let roles = http
                .get(&roles_url)
                .header("x-aws-ec2-metadata-token", &token)
                .timeout(timeout)
                .send()
                .await
                .map_err(|e| unavailable(&what, e))?;
            if !roles.status().is_success() {
                return Err(unavailable(
                    &what,
                    format!("no instance role ({})", roles.status()),
                ));
            }
            let roles = roles.text().await.map_err(|e| unavailable(&what, e))?;
            let role = roles
                .lines()
                .next()
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .ok_or_else(|| unavailable(&what, "the instance has no role"))?;
            let request = http
                .get(format!("{roles_url}{role}"))
                .header("x-aws-ec2-metadata-token", &token)
                .timeout(timeout);
            json_credentials(&what, request).await
        })
    }
}

/// One profile's settings from the shared files: `[name]` in the credentials file,
/// `[profile name]` (or `[default]`) in the config file; the credentials file wins.
fn profile_settings(
    credentials: Option<&str>,
    config: Option<&str>,
    name: &str,
) -> Option<std::collections::BTreeMap<String, String>> {
    let section = |text: &str, wanted: &[String]| {
        let mut found = None::<std::collections::BTreeMap<String, String>>;
        let mut inside = false;
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                inside = wanted.iter().any(|w| w == header.trim());
                if inside {
                    found.get_or_insert_with(Default::default);
                }
                continue;
            }
            if let (true, Some((k, v)), Some(map)) = (inside, line.split_once('='), found.as_mut())
            {
                map.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
            }
        }
        found
    };
    let from_credentials = credentials.and_then(|t| section(t, &[name.to_owned()]));
    let config_names = [format!("profile {name}"), name.to_owned()];
    let config_names: &[String] = if name == "default" {
        &config_names
    } else {
        &config_names[..1]
    };
    let from_config = config.and_then(|t| section(t, config_names));
    match (from_credentials, from_config) {
        (None, None) => None,
        (a, b) => {
            let mut merged = b.unwrap_or_default();
            merged.extend(a.unwrap_or_default());
            Some(merged)
        }
    }
}

/// The source a profile of the shared files names, if it names one.
fn profile_source(
    var: &dyn Fn(&str) -> Option<String>,
    region: &str,
) -> Option<Result<Box<dyn Source<S3Credentials>>>> {
    let home = var("HOME").unwrap_or_default();
    let read = |path: Option<String>, default: &str| {
        let path = path.unwrap_or_else(|| format!("{home}/.aws/{default}"));
        std::fs::read_to_string(path).ok()
    };
    let credentials = read(var("AWS_SHARED_CREDENTIALS_FILE"), "credentials");
    let config = read(var("AWS_CONFIG_FILE"), "config");
    let named = var("AWS_PROFILE");
    let name = named.clone().unwrap_or_else(|| "default".into());
    let what = format!("the AWS profile '{name}'");
    let Some(settings) = profile_settings(credentials.as_deref(), config.as_deref(), &name) else {
        // A profile asked for by name must exist; `default` may be absent.
        return named.map(|_| Err(unavailable(&what, "no such profile in the shared files")));
    };
    let get = |k: &str| settings.get(k).filter(|v| !v.is_empty()).cloned();
    if let (Some(access_key), Some(secret_key)) =
        (get("aws_access_key_id"), get("aws_secret_access_key"))
    {
        return Some(Ok(Box::new(StaticSource(S3Credentials {
            access_key,
            secret_key,
            session_token: get("aws_session_token"),
        }))));
    }
    if let (Some(role_arn), Some(token_file)) = (get("role_arn"), get("web_identity_token_file")) {
        return Some(Ok(Box::new(WebIdentitySource {
            sts_endpoint: var("AWS_ENDPOINT_URL_STS")
                .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com")),
            role_arn,
            session_name: get("role_session_name").unwrap_or_else(|| "talon".into()),
            token_file: token_file.into(),
            duration_seconds: None,
        })));
    }
    if get("credential_process").is_some()
        || get("sso_start_url").is_some()
        || get("sso_session").is_some()
    {
        return Some(Err(unavailable(
            &what,
            "credential_process and SSO profiles are not implemented: give keys, a web identity, or run where a role is given",
        )));
    }
    named.map(|_| Err(unavailable(&what, "it holds no keys and no web identity")))
}

/// A profile that cannot give credentials: its error, at the first fetch.
struct FailedProfile(Error);

impl Source<S3Credentials> for FailedProfile {
    fn describe(&self) -> String {
        self.0.message().to_owned()
    }
    fn fetch<'a>(&'a self, _: &'a reqwest::Client) -> FetchFuture<'a, S3Credentials> {
        let e = Error::new(self.0.kind(), self.0.message());
        Box::pin(async move { Err(e) })
    }
}

/// The source a default chain picked.
pub struct ChainChoice<T> {
    /// It.
    pub source: Box<dyn Source<T>>,
    /// Whether it is the last resort, the instance metadata service, tried because
    /// nothing else was configured: where it cannot be reached the origin is read
    /// anonymously, as before; any other source that fails refuses to start.
    pub last_resort: bool,
}

/// The first source of AWS's default chain that the environment configures
/// (`env` reads a variable), or `None` where only the instance metadata service is left
/// and `AWS_EC2_METADATA_DISABLED` is `true`.
pub fn default_chain(env: &dyn Fn(&str) -> Option<String>) -> Option<ChainChoice<S3Credentials>> {
    let configured = |source: Box<dyn Source<S3Credentials>>| {
        Some(ChainChoice {
            source,
            last_resort: false,
        })
    };
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let region = var("AWS_REGION")
        .or_else(|| var("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|| "us-east-1".into());
    if let (Some(access_key), Some(secret_key)) =
        (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY"))
    {
        return configured(Box::new(StaticSource(S3Credentials {
            access_key,
            secret_key,
            session_token: var("AWS_SESSION_TOKEN"),
        })));
    }
    match profile_source(&var, &region) {
        Some(Ok(source)) => return configured(source),
        // A profile that names what cannot be used: a source that fails at start.
        Some(Err(e)) => return configured(Box::new(FailedProfile(e))),
        None => {}
    }
    if let (Some(token_file), Some(role_arn)) =
        (var("AWS_WEB_IDENTITY_TOKEN_FILE"), var("AWS_ROLE_ARN"))
    {
        return configured(Box::new(WebIdentitySource {
            sts_endpoint: var("AWS_ENDPOINT_URL_STS")
                .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com")),
            role_arn,
            session_name: var("AWS_ROLE_SESSION_NAME").unwrap_or_else(|| "talon".into()),
            token_file: token_file.into(),
            duration_seconds: None,
        }));
    }
    let container_url = var("AWS_CONTAINER_CREDENTIALS_FULL_URI").or_else(|| {
        var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").map(|p| format!("http://169.254.170.2{p}"))
    });
    if let Some(url) = container_url {
        return configured(Box::new(ContainerSource {
            url,
            token: var("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
            token_file: var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE").map(Into::into),
        }));
    }
    if var("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return None;
    }
    // An endpoint named explicitly is a choice, not a last resort.
    let named = var("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    Some(ChainChoice {
        last_resort: named.is_none(),
        source: Box::new(ImdsSource {
            endpoint: named.unwrap_or_else(|| "http://169.254.169.254".into()),
        }),
    })
}

/// What refreshing did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefreshStats {
    /// Refreshes that brought new credentials.
    pub refreshed: u64,
    /// Refreshes that failed (the last good credentials stayed).
    pub failed: u64,
    /// Seconds since the Unix epoch at which the credentials in use expire (0: never).
    pub expires_unix: u64,
}

struct State<T> {
    current: Arc<T>,
    expires: Option<SystemTime>,
    last_error: Option<String>,
}

/// Credentials kept current from a [`Source`].
pub struct Refreshing<T> {
    source: Box<dyn Source<T>>,
    http: reqwest::Client,
    state: RwLock<State<T>>,
    refreshed: AtomicU64,
    failed: AtomicU64,
}

/// S3 keys kept current.
pub type RefreshingCredentials = Refreshing<S3Credentials>;

impl<T: 'static> std::fmt::Debug for Refreshing<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefreshingCredentials")
            .field("source", &self.source.describe())
            .finish_non_exhaustive()
    }
}

/// First retry of a failed refresh; doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(5);
/// Longest wait between tries of a failing refresh.
const MAX_RETRY: Duration = Duration::from_secs(60);
/// When credentials fetched at `fetched` and expiring at `expires` are refreshed: at
/// 80% of their lifetime (at once for ones already expired).
pub fn refresh_time(fetched: SystemTime, expires: SystemTime) -> SystemTime {
    let lifetime = expires.duration_since(fetched).unwrap_or_default();
    fetched + lifetime.mul_f64(0.8)
}

impl<T: Send + Sync + 'static> Refreshing<T> {
    /// Fetches the first credentials and starts the task that refreshes them (when they
    /// expire); the task ends when the returned value is dropped.
    ///
    /// # Errors
    /// The source's error: a first resolution that fails refuses to start.
    pub async fn start(source: Box<dyn Source<T>>) -> Result<Arc<Refreshing<T>>> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| {
                Error::new(ErrorKind::InternalError, "cannot build the HTTP client").with_source(e)
            })?;
        let first = fetch_unexpired(&*source, &http).await?;
        let expires = first.expires;
        let this = Arc::new(Refreshing {
            source,
            http,
            state: RwLock::new(State {
                current: Arc::new(first.value),
                expires,
                last_error: None,
            }),
            refreshed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        });
        tracing::info!(source = %this.source.describe(), expires = ?expires, "origin credentials resolved");
        if let Some(expires) = expires {
            tokio::spawn(refresh_loop(
                Arc::downgrade(&this),
                refresh_time(SystemTime::now(), expires),
            ));
        }
        Ok(this)
    }

    /// The credentials to sign with now.
    ///
    /// # Errors
    /// [`ErrorKind::ServiceUnavailable`] once they expired and no refresh succeeded
    /// (with the last refresh's error): a request is never sent unsigned or with expired
    /// credentials.
    pub fn current(&self) -> Result<Arc<T>> {
        let state = self
            .state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match state.expires {
            Some(e) if SystemTime::now() >= e => Err(unavailable(
                &self.source.describe(),
                format!(
                    "they expired and could not be refreshed: {}",
                    state.last_error.as_deref().unwrap_or("no refresh yet")
                ),
            )),
            _ => Ok(state.current.clone()),
        }
    }

    /// What refreshing did so far.
    pub fn stats(&self) -> RefreshStats {
        let state = self
            .state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        RefreshStats {
            refreshed: self.refreshed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            expires_unix: state
                .expires
                .and_then(|e| e.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs()),
        }
    }

    /// When the credentials in hand expire (`None`: never, or not known).
    fn expires(&self) -> Option<SystemTime> {
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .expires
    }

    /// One refresh: new credentials replace the old; a failure keeps them. Returns
    /// the new expiry, or the error.
    async fn refresh(&self) -> Result<Option<SystemTime>> {
        match fetch_unexpired(&*self.source, &self.http).await {
            Ok(fetched) => {
                let mut state = self
                    .state
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                state.current = Arc::new(fetched.value);
                state.expires = fetched.expires;
                state.last_error = None;
                self.refreshed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(source = %self.source.describe(), expires = ?fetched.expires, "origin credentials refreshed");
                Ok(fetched.expires)
            }
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut state = self
                    .state
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                state.last_error = Some(e.message().to_owned());
                tracing::warn!(source = %self.source.describe(), error = %e.message(), expires = ?state.expires, "origin credentials not refreshed; the last good ones stay until they expire");
                Err(e)
            }
        }
    }
}

/// Fetches from `source`; an answer that has expired already (a skewed clock, stale
/// credentials at the endpoint) is a failure, so the refresh loop backs off instead of
/// asking again at once.
async fn fetch_unexpired<T: 'static>(
    source: &dyn Source<T>,
    http: &reqwest::Client,
) -> Result<Fetched<T>> {
    let fetched = source.fetch(http).await?;
    match fetched.expires {
        Some(e) if e <= SystemTime::now() + MIN_LIFETIME => Err(unavailable(
            &source.describe(),
            format!(
                "the answer expires at {e:?}, less than {} s from now (is this host's clock right?)",
                MIN_LIFETIME.as_secs()
            ),
        )),
        _ => Ok(fetched),
    }
}

/// The soonest a failed refresh is tried again.
const MIN_RETRY: Duration = Duration::from_millis(250);

/// Credentials that live less than this are refused as already expired.
const MIN_LIFETIME: Duration = Duration::from_secs(1);

async fn refresh_loop<T: Send + Sync + 'static>(this: Weak<Refreshing<T>>, mut at: SystemTime) {
    let mut retry = FIRST_RETRY;
    loop {
        let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
        tokio::time::sleep(wait).await;
        let Some(credentials) = this.upgrade() else {
            return;
        };
        match credentials.refresh().await {
            Ok(Some(expires)) => {
                retry = FIRST_RETRY;
                at = refresh_time(SystemTime::now(), expires);
            }
            Ok(None) => return,
            Err(_) => {
                // Again before the credentials in hand expire: a failure that passes
                // (a file read while it was being rewritten, an endpoint's hiccup) must
                // not outlast short-lived ones.
                let now = SystemTime::now();
                let left = credentials
                    .expires()
                    .and_then(|e| e.duration_since(now).ok());
                let wait = match left {
                    Some(left) => retry.min((left / 2).max(MIN_RETRY)),
                    None => retry,
                };
                at = now + wait;
                retry = (retry * 2).min(MAX_RETRY);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn refresh_at_80_percent_of_the_lifetime() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        // STS's default hour: 48 minutes in.
        assert_eq!(
            refresh_time(t0, t0 + Duration::from_secs(3600)),
            t0 + Duration::from_secs(2880)
        );
        // Two hours: 96 minutes in.
        assert_eq!(
            refresh_time(t0, t0 + Duration::from_secs(7200)),
            t0 + Duration::from_secs(5760)
        );
        // Ten seconds: 8 s.
        assert_eq!(
            refresh_time(t0, t0 + Duration::from_secs(10)),
            t0 + Duration::from_secs(8)
        );
        // Already expired: now.
        assert_eq!(refresh_time(t0, t0 - Duration::from_secs(1)), t0);
    }

    /// Good keys once, then failures.
    struct FailsAfterFirst {
        lifetime: Duration,
        calls: AtomicU64,
    }

    impl Source<S3Credentials> for FailsAfterFirst {
        fn describe(&self) -> String {
            "a source that fails after its first answer".into()
        }
        fn fetch<'a>(&'a self, _: &'a reqwest::Client) -> FetchFuture<'a, S3Credentials> {
            let n = self.calls.fetch_add(1, Ordering::Relaxed);
            let lifetime = self.lifetime;
            Box::pin(async move {
                if n > 0 {
                    return Err(unavailable("the test source", "the endpoint is down"));
                }
                Ok(Fetched {
                    value: S3Credentials {
                        access_key: "AK1".into(),
                        secret_key: "SK1".into(),
                        session_token: Some("T1".into()),
                    },
                    expires: Some(SystemTime::now() + lifetime),
                })
            })
        }
    }

    async fn until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(v) = check() {
                return v;
            }
            assert!(std::time::Instant::now() < deadline, "{what} within 30 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_failed_refresh_keeps_the_last_keys_until_they_expire_and_then_refuses() {
        let credentials = RefreshingCredentials::start(Box::new(FailsAfterFirst {
            lifetime: Duration::from_secs(3),
            calls: AtomicU64::new(0),
        }))
        .await
        .unwrap();
        until("a failed refresh", || {
            (credentials.stats().failed >= 1).then_some(())
        })
        .await;
        // Refreshed at 80% of 3 s: the keys have 0.6 s left and are still used.
        let kept = credentials.current();
        let expired = until("the keys to expire", || credentials.current().err()).await;
        assert_eq!(kept.unwrap().access_key, "AK1");
        assert_eq!(expired.kind(), ErrorKind::ServiceUnavailable);
        assert!(
            expired.message().contains("the endpoint is down"),
            "{}",
            expired.message()
        );
        assert_eq!(credentials.stats().refreshed, 0);
    }

    /// Answers, then fails once, then answers with new keys.
    struct FailsOnce {
        calls: AtomicU64,
    }

    impl Source<S3Credentials> for FailsOnce {
        fn describe(&self) -> String {
            "a source that fails once".into()
        }
        fn fetch<'a>(&'a self, _: &'a reqwest::Client) -> FetchFuture<'a, S3Credentials> {
            let n = self.calls.fetch_add(1, Ordering::Relaxed);
            Box::pin(async move {
                if n == 1 {
                    return Err(unavailable("the test source", "a passing failure"));
                }
                Ok(Fetched {
                    value: S3Credentials {
                        access_key: format!("AK{n}"),
                        secret_key: "SK".into(),
                        session_token: None,
                    },
                    expires: Some(SystemTime::now() + Duration::from_secs(3)),
                })
            })
        }
    }

    /// A refresh that fails once near the end of short-lived keys is tried again before
    /// they expire (it waited the first backoff, 5 s, and the keys lapsed: the rotated
    /// SAS file test's 503, when it read the file while it was being rewritten).
    #[tokio::test]
    async fn a_passing_refresh_failure_is_retried_before_the_keys_expire() {
        let credentials = RefreshingCredentials::start(Box::new(FailsOnce {
            calls: AtomicU64::new(0),
        }))
        .await
        .unwrap();
        let fresh = until(
            "keys from the refresh after the failure",
            || match credentials.current() {
                Ok(keys) if keys.access_key == "AK2" => Some(Ok(())),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            },
        )
        .await;
        assert!(fresh.is_ok(), "the keys lapsed: {fresh:?}");
        assert_eq!(credentials.stats().failed, 1);
    }

    /// Keys that expired before they were given.
    struct Stale;

    impl Source<S3Credentials> for Stale {
        fn describe(&self) -> String {
            "a stale source".into()
        }
        fn fetch<'a>(&'a self, _: &'a reqwest::Client) -> FetchFuture<'a, S3Credentials> {
            Box::pin(async {
                Ok(Fetched {
                    value: S3Credentials {
                        access_key: "AK".into(),
                        secret_key: "SK".into(),
                        session_token: None,
                    },
                    expires: Some(SystemTime::now() - Duration::from_secs(60)),
                })
            })
        }
    }

    #[tokio::test]
    async fn credentials_that_expired_already_are_refused_not_refreshed_in_a_loop() {
        let e = RefreshingCredentials::start(Box::new(Stale))
            .await
            .unwrap_err();
        assert!(e.message().contains("clock"), "{}", e.message());
    }

    #[test]
    fn an_answer_quoted_in_an_error_is_cut_at_a_character() {
        let answer = format!("{}\u{e9}\u{e9}\nsecond line", "a".repeat(199));
        assert_eq!(first_line(&answer), format!("{}\u{e9}", "a".repeat(199)));
    }

    #[test]
    fn profiles_come_from_the_shared_files() {
        let dir = tempfile::tempdir().unwrap();
        let credentials = dir.path().join("credentials");
        let config = dir.path().join("config");
        std::fs::write(
            &credentials,
            "[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = s\n\n[team]\naws_access_key_id=AKTEAM\naws_secret_access_key=t\n",
        )
        .unwrap();
        std::fs::write(
            &config,
            "# roles\n[profile irsa]\nrole_arn = arn:aws:iam::1:role/r\nweb_identity_token_file = /var/run/token\n[profile tool]\ncredential_process = /bin/creds\n",
        )
        .unwrap();
        let files = [
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                credentials.display().to_string(),
            ),
            ("AWS_CONFIG_FILE", config.display().to_string()),
        ];
        let chain = |profile: Option<&str>| {
            let mut env: Vec<(String, String)> = files
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect();
            if let Some(p) = profile {
                env.push(("AWS_PROFILE".into(), p.into()));
            }
            let var = move |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
            default_chain(&var).map(|c| c.source.describe())
        };
        assert_eq!(chain(None).as_deref(), Some("static keys"));
        assert_eq!(chain(Some("team")).as_deref(), Some("static keys"));
        assert!(
            chain(Some("irsa"))
                .unwrap()
                .contains("arn:aws:iam::1:role/r")
        );
        assert!(chain(Some("tool")).unwrap().contains("credential_process"));
        assert!(chain(Some("nope")).unwrap().contains("no such profile"));
        let settings = profile_settings(
            Some(&std::fs::read_to_string(&credentials).unwrap()),
            None,
            "team",
        )
        .unwrap();
        assert_eq!(settings["aws_access_key_id"], "AKTEAM");
    }

    #[test]
    fn the_chain_takes_the_first_configured_source() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let describe = |pairs| default_chain(&env(pairs)).map(|c| c.source.describe());
        assert_eq!(
            describe(&[
                ("AWS_ACCESS_KEY_ID", "a"),
                ("AWS_SECRET_ACCESS_KEY", "s"),
                ("AWS_ROLE_ARN", "r")
            ])
            .as_deref(),
            Some("static keys")
        );
        let web = describe(&[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/t"),
            ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r"),
            ("AWS_REGION", "eu-west-1"),
        ])
        .unwrap();
        assert!(web.contains("https://sts.eu-west-1.amazonaws.com"), "{web}");
        let container =
            describe(&[("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/creds")]).unwrap();
        assert!(
            container.contains("http://169.254.170.2/v2/creds"),
            "{container}"
        );
        assert!(describe(&[]).unwrap().contains("169.254.169.254"));
        assert_eq!(describe(&[("AWS_EC2_METADATA_DISABLED", "true")]), None);
    }
}
