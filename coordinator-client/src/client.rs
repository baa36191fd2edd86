//! A typed client for the admin API, for workers, cache-clients and tests.
//!
//! Errors map back onto [`CoordinatorError`]: a 404 is
//! [`CoordinatorError::UnknownWorker`], a 400 on registration is
//! [`CoordinatorError::InvalidRegistration`], any other 400 is
//! [`CoordinatorError::InvalidRequest`], and other failures are
//! [`CoordinatorError::Api`], [`CoordinatorError::Transport`] or
//! [`CoordinatorError::Decode`].

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use talon_core::cluster_auth::{ClusterSecret, Role, api_auth_header};

use crate::api::{
    CircuitsReport, CircuitsResponse, ClusterSummary, DrainRequest, DrainResponse, ErrorBody,
    FreshnessRequest, FreshnessView, HeartbeatRequest, HeartbeatResponse, InvalidateRequest,
    InvalidationsView, MemberInfo, MembersResponse, PinsRequest, PinsView, RegisterRequest,
    RegisterResponse, WarmJobView, WarmJobsResponse, WarmRequest,
};
use crate::error::CoordinatorError;

/// Default per-request timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// What [`CoordinatorClient::heartbeat_or_register`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// The heartbeat was accepted.
    Heartbeat(HeartbeatResponse),
    /// The coordinator did not know the worker, so it registered again.
    Registered(RegisterResponse),
}

impl Report {
    /// The epoch the coordinator answered with.
    pub fn epoch(&self) -> u64 {
        match self {
            Self::Heartbeat(r) => r.epoch,
            Self::Registered(r) => r.epoch,
        }
    }
}

/// A client for one coordinator. Cheap to clone (shares its connection pool).
#[derive(Debug, Clone)]
pub struct CoordinatorClient {
    base: String,
    http: reqwest::Client,
    auth: Option<(ClusterSecret, Role)>,
}

/// What the error mapping needs to know about a request.
#[derive(Clone, Copy)]
enum Kind<'a> {
    Register,
    Worker(&'a str),
    Other,
}

impl CoordinatorClient {
    /// A client for the coordinator at `base_url` (`http://host:port`), with
    /// [`DEFAULT_TIMEOUT`] per request.
    ///
    /// # Errors
    /// [`CoordinatorError::Transport`] if the HTTP client cannot be built.
    pub fn new(base_url: impl Into<String>) -> Result<Self, CoordinatorError> {
        Self::with_timeout(base_url, DEFAULT_TIMEOUT)
    }

    /// Like [`new`](Self::new) with a per-request timeout. A bare `host:port` is taken
    /// as `http://host:port`, as the operator tools take it.
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidConfig`] for a URL that is not one (naming it),
    /// [`CoordinatorError::Transport`] if the HTTP client cannot be built.
    pub fn with_timeout(
        base_url: impl Into<String>,
        timeout: Duration,
    ) -> Result<Self, CoordinatorError> {
        let http = reqwest::Client::builder().timeout(timeout).build()?;
        let given = base_url.into();
        let base = if given.contains("://") {
            given.trim_end_matches('/').to_owned()
        } else {
            format!("http://{}", given.trim_end_matches('/'))
        };
        match reqwest::Url::parse(&base) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {}
            Ok(_) => {
                return Err(CoordinatorError::InvalidConfig(format!(
                    "coordinator URL {given:?} is not http://HOST:PORT or https://HOST:PORT"
                )));
            }
            Err(e) => {
                return Err(CoordinatorError::InvalidConfig(format!(
                    "coordinator URL {given:?}: {e}"
                )));
            }
        }
        Ok(Self {
            base,
            http,
            auth: None,
        })
    }

    /// The same client, signing every request with the cluster secret in `role`
    /// (the coordinator's `auth` module); without it the coordinator refuses every `/v1/` request.
    pub fn with_auth(mut self, secret: ClusterSecret, role: Role) -> Self {
        self.auth = Some((secret, role));
        self
    }

    /// The base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        kind: Kind<'_>,
    ) -> Result<T, CoordinatorError> {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base));
        let bytes = match body {
            Some(body) => serde_json::to_vec(body)
                .map_err(|e| CoordinatorError::InvalidRequest(e.to_string()))?,
            None => Vec::new(),
        };
        if let Some((secret, role)) = &self.auth {
            let value = api_auth_header(
                secret,
                *role,
                method.as_str(),
                path,
                crate::secret::unix_now(),
                &bytes,
            );
            req = req.header(crate::secret::AUTH_HEADER, value);
        }
        if body.is_some() {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(bytes);
        }
        let resp = req.send().await?;
        let status = resp.status();
        let bytes = resp.bytes().await?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| {
                CoordinatorError::Decode(format!(
                    "{path}: {e}: {}",
                    String::from_utf8_lossy(&bytes)
                ))
            });
        }
        let message = serde_json::from_slice::<ErrorBody>(&bytes)
            .map(|b| b.error)
            .unwrap_or_else(|_| {
                // Not the coordinator's JSON error: most likely another server's port.
                format!(
                    "an answer that is not a Talon coordinator's (is {} the coordinator's \
                     address?)",
                    self.base
                )
            });
        // The body says the error as the coordinator's own type displays it; the typed
        // error displays its kind again, so it keeps only the rest.
        let typed = |variant: fn(String) -> CoordinatorError| {
            let kind = variant(String::new()).to_string();
            variant(message.strip_prefix(&kind).unwrap_or(&message).to_owned())
        };
        Err(match (status, kind) {
            (StatusCode::NOT_FOUND, Kind::Worker(id)) => CoordinatorError::UnknownWorker(id.into()),
            (StatusCode::BAD_REQUEST, Kind::Register) => {
                typed(CoordinatorError::InvalidRegistration)
            }
            (StatusCode::BAD_REQUEST, _) => typed(CoordinatorError::InvalidRequest),
            (StatusCode::UNAUTHORIZED, _) => typed(CoordinatorError::Unauthenticated),
            (StatusCode::FORBIDDEN, _) => typed(CoordinatorError::Forbidden),
            _ => CoordinatorError::Api {
                status: status.as_u16(),
                message,
            },
        })
    }

    /// Registers (or re-registers) a worker.
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidRegistration`] if the coordinator rejects it.
    pub async fn register(
        &self,
        req: &RegisterRequest,
    ) -> Result<RegisterResponse, CoordinatorError> {
        self.call(
            Method::POST,
            "/v1/workers/register",
            Some(req),
            Kind::Register,
        )
        .await
    }

    /// Sends a heartbeat for worker `id`.
    ///
    /// # Errors
    /// [`CoordinatorError::UnknownWorker`] if the coordinator does not know
    /// the worker: register again (or use
    /// [`heartbeat_or_register`](Self::heartbeat_or_register)).
    pub async fn heartbeat(
        &self,
        id: &str,
        stats: &HeartbeatRequest,
    ) -> Result<HeartbeatResponse, CoordinatorError> {
        let path = format!("/v1/workers/{}/heartbeat", path_segment(id));
        self.call(Method::POST, &path, Some(stats), Kind::Worker(id))
            .await
    }

    /// The worker's periodic call: a heartbeat with `stats`, and if the
    /// coordinator does not know the worker (it expired, or the coordinator
    /// restarted), a registration with `registration` instead.
    ///
    /// # Errors
    /// Whatever the heartbeat or the registration fails with, other than
    /// [`CoordinatorError::UnknownWorker`].
    pub async fn heartbeat_or_register(
        &self,
        registration: &RegisterRequest,
        stats: &HeartbeatRequest,
    ) -> Result<Report, CoordinatorError> {
        match self.heartbeat(&registration.id, stats).await {
            Ok(r) => Ok(Report::Heartbeat(r)),
            Err(CoordinatorError::UnknownWorker(_)) => {
                tracing::info!(id = %registration.id, "coordinator does not know this worker; registering again");
                self.register(registration).await.map(Report::Registered)
            }
            Err(e) => Err(e),
        }
    }

    /// Takes worker `id` out of placement. A worker passes its own instance; an admin
    /// any (it is not checked for the admin role).
    ///
    /// # Errors
    /// [`CoordinatorError::UnknownWorker`] if it is not a member,
    /// [`CoordinatorError::Conflict`] if it is bound to another instance.
    pub async fn drain(&self, id: &str, instance: &str) -> Result<DrainResponse, CoordinatorError> {
        let path = format!("/v1/workers/{}/drain", path_segment(id));
        let body = DrainRequest {
            instance: instance.to_owned(),
        };
        self.call(Method::POST, &path, Some(&body), Kind::Worker(id))
            .await
    }

    /// Every member and the epoch.
    ///
    /// # Errors
    /// Transport and decoding failures.
    pub async fn members(&self) -> Result<MembersResponse, CoordinatorError> {
        self.call::<(), _>(Method::GET, "/v1/members", None, Kind::Other)
            .await
    }

    /// One member.
    ///
    /// # Errors
    /// [`CoordinatorError::UnknownWorker`] if it is not a member.
    pub async fn member(&self, id: &str) -> Result<MemberInfo, CoordinatorError> {
        let path = format!("/v1/members/{}", path_segment(id));
        self.call::<(), _>(Method::GET, &path, None, Kind::Worker(id))
            .await
    }

    /// Reports reader `reader`'s circuits (a cache client's view of the workers'
    /// health), replacing its last report.
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidRequest`] for a bad report or reader id; transport
    /// and decoding failures.
    pub async fn report_circuits(
        &self,
        reader: &str,
        report: &CircuitsReport,
    ) -> Result<CircuitsResponse, CoordinatorError> {
        let path = format!("/v1/readers/{}/circuits", path_segment(reader));
        self.call(Method::POST, &path, Some(report), Kind::Other)
            .await
    }

    /// Cluster totals.
    ///
    /// # Errors
    /// Transport and decoding failures.
    pub async fn cluster(&self) -> Result<ClusterSummary, CoordinatorError> {
        self.call::<(), _>(Method::GET, "/v1/cluster", None, Kind::Other)
            .await
    }

    /// Starts a warm job (the admin or ingester role).
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidRequest`] for a bad source or a coordinator with no
    /// origin; 403 for another role; 503 when the origin's listing failed.
    pub async fn warm_start(&self, req: &WarmRequest) -> Result<WarmJobView, CoordinatorError> {
        self.call(Method::POST, "/v1/warm", Some(req), Kind::Other)
            .await
    }

    /// Warm job `id`.
    ///
    /// # Errors
    /// 404 when there is no such job; transport and decoding failures.
    pub async fn warm_job(&self, id: u64) -> Result<WarmJobView, CoordinatorError> {
        self.call::<(), _>(Method::GET, &format!("/v1/warm/{id}"), None, Kind::Other)
            .await
    }

    /// Every warm job of this coordinator.
    ///
    /// # Errors
    /// Transport and decoding failures.
    pub async fn warm_jobs(&self) -> Result<WarmJobsResponse, CoordinatorError> {
        self.call::<(), _>(Method::GET, "/v1/warm", None, Kind::Other)
            .await
    }

    /// The cluster's pinned prefixes.
    ///
    /// # Errors
    /// Transport and decoding failures.
    pub async fn pins(&self) -> Result<PinsView, CoordinatorError> {
        self.call::<(), _>(Method::GET, "/v1/pins", None, Kind::Other)
            .await
    }

    /// Replaces the cluster's pinned prefixes (the admin role); the new list.
    ///
    /// # Errors
    /// 400 for a prefix [`crate::api::pin_prefix_problem`] refuses or too many; 409 when
    /// `expect_version` no longer holds; 403 for another role.
    pub async fn set_pins(&self, req: &PinsRequest) -> Result<PinsView, CoordinatorError> {
        self.call(Method::PUT, "/v1/pins", Some(req), Kind::Other)
            .await
    }

    /// The cluster's per-prefix freshness.
    ///
    /// # Errors
    /// Transport and decoding failures.
    pub async fn freshness(&self) -> Result<FreshnessView, CoordinatorError> {
        self.call::<(), _>(Method::GET, "/v1/freshness", None, Kind::Other)
            .await
    }

    /// Replaces the cluster's per-prefix freshness (the admin role); the new rules.
    ///
    /// # Errors
    /// 400 for a prefix that names no bucket, one given twice or too many; 409 when
    /// `expect_version` no longer holds; 403 for another role.
    pub async fn set_freshness(
        &self,
        req: &FreshnessRequest,
    ) -> Result<FreshnessView, CoordinatorError> {
        self.call(Method::PUT, "/v1/freshness", Some(req), Kind::Other)
            .await
    }

    /// The cluster's invalidations still handed out.
    ///
    /// # Errors
    /// Transport and decoding failures.
    pub async fn invalidations(&self) -> Result<InvalidationsView, CoordinatorError> {
        self.call::<(), _>(Method::GET, "/v1/invalidations", None, Kind::Other)
            .await
    }

    /// Invalidates a prefix now (the admin role): every gateway and worker stops
    /// answering what it learned under it before, within a heartbeat.
    ///
    /// # Errors
    /// 400 for a prefix [`crate::api::cluster_prefix_problem`] refuses; 403 for another
    /// role.
    pub async fn invalidate(&self, prefix: &str) -> Result<InvalidationsView, CoordinatorError> {
        let req = InvalidateRequest {
            prefix: prefix.to_owned(),
        };
        self.call(Method::POST, "/v1/invalidations", Some(&req), Kind::Other)
            .await
    }

    /// Cancels warm job `id` (the blocks filled stay cached).
    ///
    /// # Errors
    /// 404 when there is no such job; 403 for a role other than admin or ingester.
    pub async fn warm_cancel(&self, id: u64) -> Result<WarmJobView, CoordinatorError> {
        self.call::<(), _>(Method::DELETE, &format!("/v1/warm/{id}"), None, Kind::Other)
            .await
    }
}

/// Percent-encodes everything outside the id alphabet, so even an invalid
/// id stays one path segment (and gets a clean 404).
fn path_segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'_' | b'-')
            || (b == b'.' && id != "." && id != "..")
        {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_stay_single() {
        assert_eq!(path_segment("w-1.a_b"), "w-1.a_b");
        assert_eq!(path_segment("a/b c"), "a%2Fb%20c");
        assert_eq!(path_segment(".."), "%2E%2E");
    }

    #[test]
    fn a_bare_host_port_is_http_and_other_schemes_are_refused() {
        let client = CoordinatorClient::new("127.0.0.1:7000/").expect("http");
        assert_eq!(client.base_url(), "http://127.0.0.1:7000");
        for bad in ["ftp://127.0.0.1:7000", "http://", "::not a url"] {
            assert!(
                matches!(
                    CoordinatorClient::new(bad),
                    Err(CoordinatorError::InvalidConfig(_))
                ),
                "{bad}"
            );
        }
    }
}
