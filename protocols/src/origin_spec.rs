//! How a command line names an origin: one URL, spelled the same for every binary
//! (`talon up --origin`, `talon-gateway --origin`, `talon-worker --origin`).
//!
//! | spelling | origin |
//! |---|---|
//! | `s3` | Amazon S3 in the signing region (`https://s3.<region>.amazonaws.com`) |
//! | `s3://HOST[:PORT]` | an S3 endpoint over HTTPS |
//! | `s3+http://HOST:PORT` | an S3 endpoint over plain HTTP (MinIO, moto, the stub) |
//! | `az://ACCOUNT` | Azure Blob Storage (`https://ACCOUNT.blob.core.windows.net`) |
//! | `az+http://HOST:PORT/ACCOUNT` | an Azure endpoint over plain HTTP (Azurite, the stub) |
//! | `az+https://HOST/ACCOUNT` | an Azure endpoint over HTTPS with the account in the path |
//!
//! Credentials never appear in the URL: they come from [`OriginSettings`] (the binaries
//! fill it from `AWS_*` and `AZURE_STORAGE_KEY`).

use crate::azure::shared_key::AccountKey;
use crate::origin::{OriginClient, OriginConfig, Origins};
use crate::s3::sigv4::S3Credentials;
use crate::{Error, ErrorKind, Result};

/// An origin as a command line names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginSpec {
    /// An S3 endpoint (base URL, no bucket).
    S3 {
        /// `https://…` or `http://…`.
        endpoint: String,
    },
    /// An Azure Blob account.
    Azure {
        /// The account's base URL.
        endpoint: String,
        /// The account name.
        account: String,
    },
}

/// What an origin URL does not carry: how to sign, and the S3 region.
#[derive(Debug, Clone, Default)]
pub struct OriginSettings {
    /// S3 signing region (`us-east-1` when empty).
    pub s3_region: String,
    /// S3 credentials; anonymous when `None`.
    pub s3_credentials: Option<S3Credentials>,
    /// Put the bucket in the host name instead of the path.
    pub s3_virtual_hosted: bool,
    /// The Azure account key for Shared Key; anonymous when `None`.
    pub azure_key: Option<AccountKey>,
    /// The per-prefix limit every request to these origins waits under
    /// ([`crate::origin::request_limit`]); none when `None`.
    pub request_limit: Option<crate::origin::request_limit::RequestLimit>,
}

impl OriginSettings {
    /// Settings from the usual environment variables: `AWS_REGION` (`us-east-1` when
    /// unset), `AWS_ACCESS_KEY_ID` with `AWS_SECRET_ACCESS_KEY` (and
    /// `AWS_SESSION_TOKEN`) for S3, `AZURE_STORAGE_KEY` for Azure; anonymous where
    /// unset. Path-style S3.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for an `AZURE_STORAGE_KEY` that is not base64.
    pub fn from_env() -> Result<OriginSettings> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let azure_key = match env("AZURE_STORAGE_KEY") {
            Some(k) => Some(AccountKey::from_base64(&k).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("AZURE_STORAGE_KEY: {}", e.message()),
                )
            })?),
            None => None,
        };
        Ok(OriginSettings {
            s3_region: env("AWS_REGION").unwrap_or_else(|| "us-east-1".into()),
            s3_credentials: match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
                (Some(access_key), Some(secret_key)) => Some(S3Credentials {
                    access_key,
                    secret_key,
                    session_token: env("AWS_SESSION_TOKEN"),
                }),
                _ => None,
            },
            s3_virtual_hosted: false,
            azure_key,
            request_limit: None,
        })
    }
}

impl OriginSpec {
    /// Parses one of the spellings in the module's table. `region` names the AWS
    /// endpoint of the bare `s3`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] naming the accepted spellings.
    pub fn parse(spec: &str, region: &str) -> Result<OriginSpec> {
        let spec = spec.trim();
        let host_only = |rest: &str| !rest.is_empty() && !rest.contains(['/', '?', '#', '@']);
        let region = if region.is_empty() {
            "us-east-1"
        } else {
            region
        };
        let parsed = if spec == "s3" {
            Some(OriginSpec::S3 {
                endpoint: format!("https://s3.{region}.amazonaws.com"),
            })
        } else if let Some(host) = spec.strip_prefix("s3://").filter(|h| host_only(h)) {
            Some(OriginSpec::S3 {
                endpoint: format!("https://{host}"),
            })
        } else if let Some(host) = spec.strip_prefix("s3+http://").filter(|h| host_only(h)) {
            Some(OriginSpec::S3 {
                endpoint: format!("http://{host}"),
            })
        } else if let Some(account) = spec.strip_prefix("az://").filter(|a| host_only(a)) {
            Some(OriginSpec::Azure {
                endpoint: format!("https://{account}.blob.core.windows.net"),
                account: account.to_owned(),
            })
        } else {
            [("az+http://", "http://"), ("az+https://", "https://")]
                .into_iter()
                .find_map(|(prefix, scheme)| {
                    let rest = spec.strip_prefix(prefix)?.trim_end_matches('/');
                    let (host, account) = rest.rsplit_once('/')?;
                    (host_only(host) && !account.is_empty() && host_only(account)).then(|| {
                        OriginSpec::Azure {
                            endpoint: format!("{scheme}{rest}"),
                            account: account.to_owned(),
                        }
                    })
                })
        };
        parsed.ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "origin '{spec}' is not s3, s3://HOST, s3+http://HOST:PORT, az://ACCOUNT, \
                     az+http://HOST:PORT/ACCOUNT or az+https://HOST/ACCOUNT"
                ),
            )
        })
    }

    /// The client configuration for this origin with `settings`' credentials.
    pub fn config(&self, settings: &OriginSettings) -> OriginConfig {
        match self {
            OriginSpec::S3 { endpoint } => OriginConfig::S3 {
                endpoint: endpoint.clone(),
                region: if settings.s3_region.is_empty() {
                    "us-east-1".into()
                } else {
                    settings.s3_region.clone()
                },
                credentials: settings.s3_credentials.clone(),
                virtual_hosted: settings.s3_virtual_hosted,
            },
            OriginSpec::Azure { endpoint, account } => OriginConfig::Azure {
                endpoint: endpoint.clone(),
                account: account.clone(),
                key: settings.azure_key.clone(),
                sas: None,
            },
        }
    }
}

impl Origins {
    /// The origin clients for `specs`: at most one S3 and one Azure origin.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for two origins of one protocol; the client's own
    /// errors.
    pub fn from_specs(specs: &[OriginSpec], settings: &OriginSettings) -> Result<Origins> {
        let mut origins = Origins::default();
        for spec in specs {
            let twice = |what: &str| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("two {what} origins given; a process serves at most one of each"),
                )
            };
            let client = OriginClient::new(spec.config(settings))?;
            match spec {
                OriginSpec::S3 { .. } if origins.s3.is_some() => return Err(twice("S3")),
                OriginSpec::S3 { .. } => origins.s3 = Some(client),
                OriginSpec::Azure { .. } if origins.azure.is_some() => {
                    return Err(twice("Azure"));
                }
                OriginSpec::Azure { account, .. } => {
                    origins.azure = Some((account.clone(), client))
                }
            }
        }
        Ok(match settings.request_limit {
            Some(limit) => origins.with_request_limit(limit),
            None => origins,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn s3(endpoint: &str) -> OriginSpec {
        OriginSpec::S3 {
            endpoint: endpoint.into(),
        }
    }

    fn azure(endpoint: &str, account: &str) -> OriginSpec {
        OriginSpec::Azure {
            endpoint: endpoint.into(),
            account: account.into(),
        }
    }

    #[test]
    fn every_documented_spelling_parses() {
        let cases = [
            ("s3", s3("https://s3.eu-west-1.amazonaws.com")),
            ("s3://minio.example:9000", s3("https://minio.example:9000")),
            ("s3+http://127.0.0.1:9000", s3("http://127.0.0.1:9000")),
            (
                "az://acct",
                azure("https://acct.blob.core.windows.net", "acct"),
            ),
            (
                "az+http://127.0.0.1:10000/devstoreaccount1",
                azure(
                    "http://127.0.0.1:10000/devstoreaccount1",
                    "devstoreaccount1",
                ),
            ),
            (
                "az+https://blob.example/acct/",
                azure("https://blob.example/acct", "acct"),
            ),
        ];
        for (spelling, want) in cases {
            assert_eq!(
                OriginSpec::parse(spelling, "eu-west-1").unwrap(),
                want,
                "{spelling}"
            );
        }
    }

    #[test]
    fn anything_else_is_refused_with_the_spellings() {
        for bad in [
            "",
            "http://127.0.0.1:9000",
            "s3://",
            "s3://host/bucket",
            "s3://user@host",
            "az+http://127.0.0.1:10000",
            "az://acct/extra",
            "gs://bucket",
        ] {
            let e = OriginSpec::parse(bad, "").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad}");
            assert!(
                e.message().contains("s3+http://HOST:PORT"),
                "{bad}: {}",
                e.message()
            );
        }
    }

    #[test]
    fn one_origin_of_each_protocol() {
        let settings = OriginSettings::default();
        let both = [s3("http://127.0.0.1:1"), azure("http://127.0.0.1:2/a", "a")];
        let origins = Origins::from_specs(&both, &settings).unwrap();
        assert!(origins.s3.is_some());
        assert_eq!(origins.azure.as_ref().unwrap().0, "a");
        let twice = [s3("http://127.0.0.1:1"), s3("http://127.0.0.1:3")];
        let e = Origins::from_specs(&twice, &settings).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
}
