//! The start-up check of an origin: one cheap request (S3 ListBuckets, Azure List
//! Containers, signed as every request is) that says, before a process says it is up,
//! whether the origin is reachable, speaks the protocol at that scheme and port, and
//! accepts the credentials. A problem is one line naming the URL, what was tried and
//! what to do (the first-hour review's F2: a dead origin or missing credentials were
//! found only by the first client, as "Anonymous access is not allowed" or a 503).

use std::time::Duration;

use super::{OriginClient, OriginConfig, Origins};
use crate::ErrorKind;

/// What checking one origin found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartCheck {
    /// The origin's URL.
    pub url: String,
    /// `None`: ready; otherwise one line saying what is wrong and what to do.
    pub problem: Option<String>,
    /// What was seen, for the log (a ready origin too).
    pub seen: String,
}

/// How long the check waits for the origin's answer.
pub const START_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

impl OriginClient {
    /// Whether requests carry credentials (keys, a token, a SAS); `false`: unsigned.
    pub fn signs(&self) -> bool {
        if self.refreshing.is_some() {
            return true;
        }
        match &self.config {
            OriginConfig::S3 { credentials, .. } => credentials.is_some(),
            OriginConfig::Azure { key, sas, .. } => key.is_some() || sas.is_some(),
        }
    }

    /// Asks the origin for its buckets (containers) once, within `within`, and judges
    /// the answer ([`StartCheck`]).
    pub async fn check_at_start(&self, within: Duration) -> StartCheck {
        let url = self.dialect.endpoint().to_owned();
        let (protocol, list, keys) = match &self.config {
            OriginConfig::S3 { .. } => (
                "S3",
                "ListBuckets",
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile (AWS_PROFILE), web \
                 identity or the instance's role",
            ),
            OriginConfig::Azure { .. } => (
                "Azure Blob",
                "List Containers",
                "AZURE_STORAGE_KEY, a SAS, workload identity or a managed identity",
            ),
        };
        let answer = tokio::time::timeout(within, self.list_buckets()).await;
        let problem = |line: String| StartCheck {
            url: url.clone(),
            problem: Some(line),
            seen: String::new(),
        };
        let ready = |seen: String| StartCheck {
            url: url.clone(),
            problem: None,
            seen,
        };
        let e = match answer {
            Err(_) => {
                return problem(format!(
                    "the origin at {url} did not answer {list} within {} s: check the host \
                     and the port, and that nothing between drops the connection",
                    within.as_secs()
                ));
            }
            Ok(Ok(buckets)) => {
                return ready(format!("{list} answered ({} listed)", buckets.len()));
            }
            Ok(Err(e)) => e,
        };
        if let Some(cause) = transport_cause(&e) {
            return problem(format!(
                "cannot reach the origin at {url} ({list}: {cause}): check the host and the \
                 port, and the scheme ({})",
                scheme_hint(&url)
            ));
        }
        let signs = self.signs();
        match e.kind() {
            // Signed and refused only the listing: the keys are good, the identity may
            // not list the account, which nothing else here needs.
            ErrorKind::AccessDenied | ErrorKind::PermissionMismatch if signs => ready(format!(
                "{list} refused with {:?} (the credentials were accepted; reading needs no listing of the account)",
                e.kind()
            )),
            ErrorKind::AccessDenied
            | ErrorKind::PermissionMismatch
            | ErrorKind::MissingCredentials => problem(format!(
                "the origin at {url} refuses unsigned requests ({list}: {}), and no \
                     credentials were found for it: set {keys} (a public bucket needs none)",
                e.message()
            )),
            ErrorKind::InvalidAccessKeyId
            | ErrorKind::SignatureDoesNotMatch
            | ErrorKind::RequestTimeTooSkewed
            | ErrorKind::ExpiredRequest => problem(format!(
                "the origin at {url} refused the credentials ({list}: {:?}: {}): check {keys}",
                e.kind(),
                e.message()
            )),
            // Busy or failing for now: reads retry; the process may start.
            ErrorKind::SlowDown | ErrorKind::ServiceUnavailable | ErrorKind::InternalError => {
                ready(format!(
                    "{list} answered {:?} for now: {}",
                    e.kind(),
                    e.message()
                ))
            }
            _ => problem(format!(
                "the origin at {url} did not answer {list} as an {protocol} server ({:?}: {}): \
                 check that the URL names one, and the scheme ({})",
                e.kind(),
                e.message(),
                scheme_hint(&url)
            )),
        }
    }
}

impl Origins {
    /// [`OriginClient::check_at_start`] for each configured origin.
    pub async fn check_at_start(&self, within: Duration) -> Vec<StartCheck> {
        let mut checks = Vec::new();
        if let Some(s3) = &self.s3 {
            checks.push(s3.check_at_start(within).await);
        }
        if let Some((_, azure)) = &self.azure {
            checks.push(azure.check_at_start(within).await);
        }
        checks
    }
}

/// The transport failure under an origin error (refused, reset, DNS, TLS), as text with
/// its causes; `None` when the origin answered.
fn transport_cause(e: &crate::Error) -> Option<String> {
    let mut cause = std::error::Error::source(e)?;
    cause.downcast_ref::<reqwest::Error>()?;
    let mut line = cause.to_string();
    while let Some(next) = cause.source() {
        let text = next.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = next;
    }
    Some(line)
}

fn scheme_hint(url: &str) -> &'static str {
    if url.starts_with("https://") {
        "this is https: s3://HOST[:PORT] and az://ACCOUNT are https; a plain-HTTP origin is s3+http://HOST:PORT or az+http://HOST:PORT/ACCOUNT"
    } else {
        "this is plain http: s3+http:// and az+http:// are http; s3://HOST[:PORT] for https"
    }
}

/// What a process does when an origin fails its start-up check (`--origin-check`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OriginCheckMode {
    /// Refuse to start, with the problem (the default).
    #[default]
    Fail,
    /// Start anyway, saying the problem in the log (and a gateway's `/readyz`) until the
    /// origin passes.
    Warn,
    /// Do not check.
    Off,
}

impl std::str::FromStr for OriginCheckMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fail" => Ok(OriginCheckMode::Fail),
            "warn" => Ok(OriginCheckMode::Warn),
            "off" => Ok(OriginCheckMode::Off),
            other => Err(format!("'{other}' is not fail, warn or off")),
        }
    }
}

/// Checks every origin of `origins` as `mode` says, logging what each check saw: the
/// problems found (none when all are ready, or with [`OriginCheckMode::Off`]).
///
/// # Errors
/// With [`OriginCheckMode::Fail`], the problems as one error
/// ([`ErrorKind::ServiceUnavailable`]).
pub async fn check_origins(
    origins: &Origins,
    mode: OriginCheckMode,
) -> Result<Vec<String>, crate::Error> {
    if mode == OriginCheckMode::Off {
        return Ok(Vec::new());
    }
    let mut problems = Vec::new();
    for check in origins.check_at_start(START_CHECK_TIMEOUT).await {
        match check.problem {
            None => {
                tracing::info!(origin = %check.url, seen = %check.seen, "the origin passed its check")
            }
            Some(problem) => {
                // With Fail the process's own last line says it.
                if mode == OriginCheckMode::Warn {
                    tracing::warn!(origin = %check.url, %problem, "the origin failed its check; starting anyway (--origin-check warn)");
                }
                problems.push(problem);
            }
        }
    }
    if mode == OriginCheckMode::Fail && !problems.is_empty() {
        return Err(crate::Error::new(
            ErrorKind::ServiceUnavailable,
            format!(
                "{} (--origin-check warn starts anyway; off skips the check)",
                problems.join("; ")
            ),
        ));
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_modes_parse_by_name_and_nothing_else() {
        assert_eq!("fail".parse(), Ok(OriginCheckMode::Fail));
        assert_eq!("warn".parse(), Ok(OriginCheckMode::Warn));
        assert_eq!("off".parse(), Ok(OriginCheckMode::Off));
        assert!("Fail".parse::<OriginCheckMode>().is_err());
        assert!("".parse::<OriginCheckMode>().is_err());
    }

    #[tokio::test]
    async fn a_dead_origin_is_a_problem_naming_its_url_and_off_checks_nothing() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let origins = Origins {
            s3: Some(
                OriginClient::new(OriginConfig::S3 {
                    endpoint: format!("http://127.0.0.1:{port}"),
                    region: "us-east-1".into(),
                    credentials: None,
                    virtual_hosted: false,
                })
                .unwrap(),
            ),
            azure: None,
        };
        let err = check_origins(&origins, OriginCheckMode::Fail)
            .await
            .unwrap_err();
        assert!(
            err.message().contains(&format!(
                "cannot reach the origin at http://127.0.0.1:{port}"
            )),
            "{err}"
        );
        let warned = check_origins(&origins, OriginCheckMode::Warn)
            .await
            .unwrap();
        assert_eq!(warned.len(), 1);
        assert!(
            check_origins(&origins, OriginCheckMode::Off)
                .await
                .unwrap()
                .is_empty()
        );
    }
}
