//! The Azure origin's credentials as AKS pods, Azure VMs and services get them, kept
//! current by [`super::credentials::Refreshing`] (refresh at 80% of the lifetime, the
//! last good kept until it expires, never a request with an expired one):
//!
//! | source | when | exchange |
//! |---|---|---|
//! | SAS file | `--origin-azure-sas-file` | the file read again at 80% of the SAS's lifetime (its `se`), so a rotated SAS is picked up |
//! | workload identity (AKS) | `AZURE_FEDERATED_TOKEN_FILE`, `AZURE_CLIENT_ID`, `AZURE_TENANT_ID` | Entra ID `POST {authority}/{tenant}/oauth2/v2.0/token`, `client_credentials` with the file's token as `client_assertion` |
//! | service principal | `AZURE_CLIENT_SECRET`, `AZURE_CLIENT_ID`, `AZURE_TENANT_ID` | the same endpoint with `client_secret` |
//! | managed identity | `IDENTITY_ENDPOINT` and `IDENTITY_HEADER` (App Service, Container Apps, Arc), else the instance metadata service | `GET` with `X-IDENTITY-HEADER` (or `Metadata: true` at `169.254.169.254`) |
//!
//! Tokens are asked for `https://storage.azure.com/.default`; the authority is
//! `AZURE_AUTHORITY_HOST` or `https://login.microsoftonline.com`.

use std::time::{Duration, SystemTime};

use serde::Deserialize;

use super::credentials::{ChainChoice, FetchFuture, Fetched, Source, json_answer, unavailable};
use crate::error::Result;

/// How an Azure request is authorized by a source that changes.
#[derive(Clone, PartialEq, Eq)]
pub enum AzureAuth {
    /// `Authorization: Bearer <token>` (an Entra ID access token for Azure Storage).
    Bearer(String),
    /// A SAS query string (without `?`) added to every request.
    Sas(String),
}

impl std::fmt::Debug for AzureAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AzureAuth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            AzureAuth::Sas(_) => f.write_str("Sas(<redacted>)"),
        }
    }
}

/// The resource tokens are asked for.
const STORAGE_SCOPE: &str = "https://storage.azure.com/.default";
const STORAGE_RESOURCE: &str = "https://storage.azure.com/";

/// A SAS read from a file (a Secret mounted in a pod, rotated by whoever writes it).
pub struct SasFileSource {
    /// The file.
    pub path: std::path::PathBuf,
}

/// The expiry (`se`) a SAS query string names.
fn sas_expiry(what: &str, sas: &str) -> Result<Option<SystemTime>> {
    let Some(se) = sas
        .trim_start_matches('?')
        .split('&')
        .find_map(|p| p.strip_prefix("se="))
    else {
        return Ok(None);
    };
    let decoded = crate::uri_encoding::decode_query_component(se);
    super::credentials::rfc3339(what, &decoded).map(Some)
}

impl Source<AzureAuth> for SasFileSource {
    fn describe(&self) -> String {
        format!("the SAS file {}", self.path.display())
    }

    fn fetch<'a>(&'a self, _: &'a reqwest::Client) -> FetchFuture<'a, AzureAuth> {
        Box::pin(async move {
            let what = self.describe();
            let text = std::fs::read_to_string(&self.path)
                .map_err(|e| unavailable(&what, format!("reading it: {e}")))?;
            let sas = text.trim().trim_start_matches('?').to_owned();
            if !sas.contains("sig=") {
                return Err(unavailable(&what, "it holds no SAS (no sig=)"));
            }
            let expires = sas_expiry(&what, &sas)?;
            if expires.is_some_and(|e| e <= SystemTime::now()) {
                return Err(unavailable(&what, "the SAS in it has expired"));
            }
            Ok(Fetched {
                value: AzureAuth::Sas(sas),
                expires,
            })
        })
    }
}

/// What the Entra ID token endpoint answers (`expires_in` is a number there, a string
/// at some managed identity endpoints).
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    expires_in: Option<serde_json::Value>,
    #[serde(default)]
    expires_on: Option<serde_json::Value>,
}

fn number(v: &serde_json::Value) -> Option<u64> {
    match v {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

impl TokenAnswer {
    fn into_fetched(self, what: &str) -> Result<Fetched<AzureAuth>> {
        let expires = if let Some(on) = self.expires_on.as_ref().and_then(number) {
            SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(on))
        } else if let Some(within) = self.expires_in.as_ref().and_then(number) {
            SystemTime::now().checked_add(Duration::from_secs(within))
        } else {
            return Err(unavailable(what, "the token answer names no expiry"));
        };
        let expires =
            expires.ok_or_else(|| unavailable(what, "the token's expiry is out of range"))?;
        Ok(Fetched {
            value: AzureAuth::Bearer(self.access_token),
            expires: Some(expires),
        })
    }
}

async fn token(what: &str, request: reqwest::RequestBuilder) -> Result<Fetched<AzureAuth>> {
    json_answer::<TokenAnswer>(what, request)
        .await?
        .into_fetched(what)
}

/// How an Entra ID client proves itself.
pub enum ClientProof {
    /// A client secret.
    Secret(String),
    /// A federated token in a file (AKS workload identity), read again each time.
    FederatedTokenFile(std::path::PathBuf),
}

/// An Entra ID application's token for Azure Storage.
pub struct EntraSource {
    /// `https://login.microsoftonline.com` unless `AZURE_AUTHORITY_HOST` says otherwise.
    pub authority: String,
    /// The tenant.
    pub tenant: String,
    /// The application (client) id.
    pub client_id: String,
    /// How it proves itself.
    pub proof: ClientProof,
}

impl Source<AzureAuth> for EntraSource {
    fn describe(&self) -> String {
        let how = match &self.proof {
            ClientProof::Secret(_) => "client secret".to_owned(),
            ClientProof::FederatedTokenFile(f) => format!("workload identity, {}", f.display()),
        };
        format!(
            "Entra ID ({how}; tenant {}, client {}, {})",
            self.tenant, self.client_id, self.authority
        )
    }

    fn fetch<'a>(&'a self, http: &'a reqwest::Client) -> FetchFuture<'a, AzureAuth> {
        Box::pin(async move {
            let what = self.describe();
            let mut form = vec![
                ("grant_type", "client_credentials".to_owned()),
                ("client_id", self.client_id.clone()),
                ("scope", STORAGE_SCOPE.to_owned()),
            ];
            match &self.proof {
                ClientProof::Secret(s) => form.push(("client_secret", s.clone())),
                ClientProof::FederatedTokenFile(f) => {
                    let assertion = std::fs::read_to_string(f)
                        .map_err(|e| unavailable(&what, format!("reading {}: {e}", f.display())))?;
                    form.push((
                        "client_assertion_type",
                        "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".to_owned(),
                    ));
                    form.push(("client_assertion", assertion.trim().to_owned()));
                }
            }
            let body = form
                .iter()
                .map(|(k, v)| format!("{k}={}", crate::uri_encoding::encode_strict(v)))
                .collect::<Vec<_>>()
                .join("&");
            let url = format!(
                "{}/{}/oauth2/v2.0/token",
                self.authority.trim_end_matches('/'),
                crate::uri_encoding::encode_strict(&self.tenant)
            );
            let request = http
                .post(url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body);
            token(&what, request).await
        })
    }
}

/// A managed identity's token for Azure Storage.
pub struct ManagedIdentitySource {
    /// `IDENTITY_ENDPOINT`, or the instance metadata service's token URL.
    pub endpoint: String,
    /// `IDENTITY_HEADER` (sent as `X-IDENTITY-HEADER`); `None` at the instance metadata
    /// service (which takes `Metadata: true`).
    pub identity_header: Option<String>,
    /// A user-assigned identity's client id (`AZURE_CLIENT_ID`).
    pub client_id: Option<String>,
}

impl Source<AzureAuth> for ManagedIdentitySource {
    fn describe(&self) -> String {
        format!("the managed identity endpoint {}", self.endpoint)
    }

    fn fetch<'a>(&'a self, http: &'a reqwest::Client) -> FetchFuture<'a, AzureAuth> {
        Box::pin(async move {
            let what = self.describe();
            let (version, mut request) = match &self.identity_header {
                Some(h) => (
                    "2019-08-01",
                    http.get(&self.endpoint).header("x-identity-header", h),
                ),
                None => (
                    "2018-02-01",
                    http.get(&self.endpoint).header("metadata", "true"),
                ),
            };
            let mut query = vec![("api-version", version), ("resource", STORAGE_RESOURCE)];
            if let Some(id) = &self.client_id {
                query.push(("client_id", id));
            }
            request = request.query(&query).timeout(Duration::from_secs(3));
            token(&what, request).await
        })
    }
}

/// The first Azure source the environment configures (`env` reads a variable;
/// `sas_file` is the flag's), or the instance metadata service as the last resort
/// unless `AZURE_IMDS_DISABLED` is `true`.
pub fn default_azure_chain(
    env: &dyn Fn(&str) -> Option<String>,
    sas_file: Option<&std::path::Path>,
) -> Option<ChainChoice<AzureAuth>> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let configured = |source: Box<dyn Source<AzureAuth>>| {
        Some(ChainChoice {
            source,
            last_resort: false,
        })
    };
    if let Some(path) = sas_file {
        return configured(Box::new(SasFileSource {
            path: path.to_owned(),
        }));
    }
    let authority =
        var("AZURE_AUTHORITY_HOST").unwrap_or_else(|| "https://login.microsoftonline.com".into());
    if let (Some(client_id), Some(tenant)) = (var("AZURE_CLIENT_ID"), var("AZURE_TENANT_ID")) {
        if let Some(file) = var("AZURE_FEDERATED_TOKEN_FILE") {
            return configured(Box::new(EntraSource {
                authority,
                tenant,
                client_id,
                proof: ClientProof::FederatedTokenFile(file.into()),
            }));
        }
        if let Some(secret) = var("AZURE_CLIENT_SECRET") {
            return configured(Box::new(EntraSource {
                authority,
                tenant,
                client_id,
                proof: ClientProof::Secret(secret),
            }));
        }
    }
    if let (Some(endpoint), Some(header)) = (var("IDENTITY_ENDPOINT"), var("IDENTITY_HEADER")) {
        return configured(Box::new(ManagedIdentitySource {
            endpoint,
            identity_header: Some(header),
            client_id: var("AZURE_CLIENT_ID"),
        }));
    }
    if var("AZURE_IMDS_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return None;
    }
    Some(ChainChoice {
        source: Box::new(ManagedIdentitySource {
            endpoint: "http://169.254.169.254/metadata/identity/oauth2/token".into(),
            identity_header: None,
            client_id: var("AZURE_CLIENT_ID"),
        }),
        last_resort: true,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn chain(pairs: &[(&str, &str)], sas: Option<&std::path::Path>) -> Option<String> {
        let env = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        };
        default_azure_chain(&env, sas).map(|c| c.source.describe())
    }

    #[test]
    fn the_chain_takes_the_first_configured_source() {
        let ids = [("AZURE_CLIENT_ID", "c"), ("AZURE_TENANT_ID", "t")];
        let sas = std::path::Path::new("/run/sas");
        assert!(chain(&ids, Some(sas)).unwrap().contains("/run/sas"));
        let with = |extra| [ids[0], ids[1], extra];
        let federated = chain(&with(("AZURE_FEDERATED_TOKEN_FILE", "/t")), None).unwrap();
        assert!(federated.contains("workload identity"), "{federated}");
        let secret = chain(&with(("AZURE_CLIENT_SECRET", "s")), None).unwrap();
        assert!(secret.contains("client secret"), "{secret}");
        let app = chain(
            &[
                ("IDENTITY_ENDPOINT", "http://x/msi"),
                ("IDENTITY_HEADER", "h"),
            ],
            None,
        )
        .unwrap();
        assert!(app.contains("http://x/msi"), "{app}");
        assert!(chain(&[], None).unwrap().contains("169.254.169.254"));
        assert_eq!(chain(&[("AZURE_IMDS_DISABLED", "true")], None), None);
    }

    #[test]
    fn an_expiry_out_of_range_is_an_error_not_a_panic() {
        for answer in [
            r#"{"access_token": "t", "expires_on": "18446744073709551615"}"#,
            r#"{"access_token": "t", "expires_in": 18446744073709551615}"#,
            r#"{"access_token": "t"}"#,
        ] {
            let parsed: TokenAnswer = serde_json::from_str(answer).unwrap();
            assert!(parsed.into_fetched("t").is_err(), "{answer}");
        }
    }

    #[test]
    fn a_sas_names_its_expiry() {
        let e = sas_expiry(
            "t",
            "sv=2025-01-05&se=2030-01-02T03%3A04%3A05Z&sr=c&sp=r&sig=x",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            e.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            1_893_553_445
        );
        assert_eq!(sas_expiry("t", "sv=1&sig=x").unwrap(), None);
    }
}
