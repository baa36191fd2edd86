//! The identities file: the keys clients sign with, what each may do, and what is open
//! without a key. One JSON document for both fronts:
//!
//! ```json
//! {
//!   "s3": [
//!     {"access_key": "trainer", "secret_key": "...",
//!      "grants": [{"bucket": "datasets", "prefix": "train/", "actions": ["read", "list"]}]},
//!     {"access_key": "ingest", "secret_key": "...",
//!      "grants": [{"bucket": "datasets", "actions": ["read", "list", "write", "delete"]}]}
//!   ],
//!   "azure": {"account": "devstoreaccount1", "key": "base64...",
//!             "grants": [{"bucket": "*", "actions": ["read", "list", "write", "delete", "admin"]}],
//!             "sas_grants": [{"bucket": "datasets", "actions": ["read", "list"]}]},
//!   "anonymous": "none",
//!   "public": [{"bucket": "open-data", "actions": ["read", "list"]}]
//! }
//! ```
//!
//! A grant names a bucket (S3) or container (Azure), or `"*"` for all of them; an
//! optional key `prefix`; and its actions (`read`, `list`, `write`, `delete`, `admin`).
//! An identity with a `grants` list may do what it lists and nothing else (`[]`:
//! nothing); an identity without one may do everything, as every key could before
//! grants existed. `sas_grants` bound what a SAS signed with the account key may do (its
//! own permissions still apply); without it a SAS has the key's grants. `public` opens
//! buckets or prefixes to unsigned reads and listings (only `read` and `list` may be
//! granted there); `anonymous` (`none`, `read`, `read-write`) is the older switch for
//! every bucket at once.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Action, Actions, AnonymousAccess, EVERY_BUCKET, Grant, Grants};
use crate::azure::auth::AzureIdentity;
use crate::azure::shared_key::AccountKey;
use crate::error::{Error, ErrorKind, Result};
use crate::s3::auth::S3Identities;

/// Longest grant prefix accepted, in bytes (S3 keys are at most 1,024).
const MAX_PREFIX_LEN: usize = 1024;

/// The identities file, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentitiesFile {
    /// S3 access keys.
    #[serde(default)]
    pub s3: Vec<S3Key>,
    /// The Azure account clients address, and its key.
    #[serde(default)]
    pub azure: Option<AzureAccount>,
    /// What unauthenticated requests may do in every bucket, on both fronts.
    #[serde(default, deserialize_with = "anonymous_setting")]
    pub anonymous: AnonymousAccess,
    /// Buckets or prefixes unauthenticated requests may read and list, on both fronts.
    #[serde(default)]
    pub public: Vec<GrantSpec>,
}

/// One S3 access key.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Key {
    /// Access key id.
    pub access_key: String,
    /// Secret.
    pub secret_key: String,
    /// What it may do; `None`: everything.
    #[serde(default)]
    pub grants: Option<Vec<GrantSpec>>,
}

impl S3Key {
    /// A key that may do everything.
    pub fn unrestricted(access_key: impl Into<String>, secret_key: impl Into<String>) -> S3Key {
        S3Key {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            grants: None,
        }
    }
}

/// The Azure account clients see.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AzureAccount {
    /// Account name.
    pub account: String,
    /// Account key, base64.
    pub key: Option<String>,
    /// What a Shared Key request may do; `None`: everything.
    #[serde(default)]
    pub grants: Option<Vec<GrantSpec>>,
    /// What a SAS may do at most; `None`: what `grants` allows.
    #[serde(default)]
    pub sas_grants: Option<Vec<GrantSpec>>,
}

/// One grant, as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantSpec {
    /// A bucket or container name, or `"*"`.
    pub bucket: String,
    /// Keys covered start with this; empty or absent: the whole bucket.
    #[serde(default)]
    pub prefix: String,
    /// Action names.
    pub actions: Vec<String>,
}

/// `anonymous` as a level name or, as older files have it, a boolean (`true` is
/// read-only: writes must always be asked for by name).
fn anonymous_setting<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<AnonymousAccess, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Setting {
        Flag(bool),
        Level(String),
    }
    match Setting::deserialize(d)? {
        Setting::Flag(true) => Ok(AnonymousAccess::ReadOnly),
        Setting::Flag(false) => Ok(AnonymousAccess::Refused),
        Setting::Level(l) => l.parse().map_err(serde::de::Error::custom),
    }
}

fn invalid(why: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::InvalidArgument, why.to_string())
}

/// Both fronts' identities, as the servers use them.
#[derive(Debug, Clone)]
pub struct FrontIdentities {
    /// The S3 front's.
    pub s3: S3Identities,
    /// The Azure front's.
    pub azure: AzureIdentity,
}

impl IdentitiesFile {
    /// Parses a file's text.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] naming what does not parse.
    pub fn parse(text: &str) -> Result<IdentitiesFile> {
        serde_json::from_str(text).map_err(invalid)
    }

    /// Checks every grant and key and builds what the servers use. `default_account`
    /// names the Azure account when the file has none.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for an unknown action, a grant without actions, a
    /// bucket name with `/`, a public grant beyond `read` and `list`, an access key given
    /// twice, or an Azure key that is not base64.
    pub fn build(self, default_account: &str) -> Result<FrontIdentities> {
        let public = grants("public", self.public)?;
        if let Some(g) = public
            .as_slice()
            .iter()
            .find(|g| !g.actions.is_within(Actions::READ_AND_LIST))
        {
            return Err(invalid(format!(
                "public grant on '{}' allows {}: only read and list may be public",
                g.bucket, g.actions
            )));
        }
        let mut secrets = BTreeMap::new();
        let mut key_grants = BTreeMap::new();
        for key in self.s3 {
            if key.access_key.is_empty() {
                return Err(invalid("an S3 key has an empty access_key"));
            }
            let what = format!("S3 key '{}'", key.access_key);
            let granted = optional_grants(&what, key.grants)?;
            if secrets
                .insert(key.access_key.clone(), key.secret_key)
                .is_some()
            {
                return Err(invalid(format!("{what} is given twice")));
            }
            key_grants.insert(key.access_key, granted);
        }
        let s3 = S3Identities {
            secrets,
            grants: key_grants,
            anonymous: self.anonymous,
            public: public.clone(),
            // Filled in with the S3 front's region when a server starts.
            regions: Vec::new(),
        };
        let azure = match self.azure {
            Some(a) => {
                let key = a
                    .key
                    .map(|k| AccountKey::from_base64(&k))
                    .transpose()
                    .map_err(|e| invalid(format!("azure key: {}", e.message())))?;
                let granted = optional_grants("the Azure account key", a.grants)?;
                let sas_grants = match a.sas_grants {
                    Some(list) => grants("the Azure SAS grants", list)?,
                    None => granted.clone(),
                };
                AzureIdentity {
                    account: a.account,
                    key,
                    grants: granted,
                    sas_grants,
                    anonymous: self.anonymous,
                    public,
                }
            }
            None => AzureIdentity {
                account: default_account.to_owned(),
                key: None,
                grants: Grants::everything(),
                sas_grants: Grants::everything(),
                anonymous: self.anonymous,
                public,
            },
        };
        Ok(FrontIdentities { s3, azure })
    }
}

fn optional_grants(what: &str, list: Option<Vec<GrantSpec>>) -> Result<Grants> {
    match list {
        None => Ok(Grants::everything()),
        Some(list) => grants(what, list),
    }
}

fn grants(what: &str, list: Vec<GrantSpec>) -> Result<Grants> {
    list.into_iter()
        .map(|spec| grant(what, spec))
        .collect::<Result<Vec<_>>>()
        .map(Grants::new)
}

fn grant(what: &str, spec: GrantSpec) -> Result<Grant> {
    if spec.bucket.is_empty() || (spec.bucket != EVERY_BUCKET && spec.bucket.contains('/')) {
        return Err(invalid(format!(
            "{what}: a grant's bucket must be a bucket or container name, or \"*\" (got '{}')",
            spec.bucket
        )));
    }
    if spec.prefix.len() > MAX_PREFIX_LEN {
        return Err(invalid(format!(
            "{what}: a grant's prefix is longer than {MAX_PREFIX_LEN} bytes"
        )));
    }
    if spec.actions.is_empty() {
        return Err(invalid(format!(
            "{what}: the grant on '{}' has no actions",
            spec.bucket
        )));
    }
    let actions = spec
        .actions
        .iter()
        .map(|a| a.parse::<Action>())
        .collect::<std::result::Result<Actions, _>>()
        .map_err(|e| invalid(format!("{what}: {e}")))?;
    Ok(Grant {
        bucket: spec.bucket,
        prefix: spec.prefix,
        actions,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn build(text: &str) -> Result<FrontIdentities> {
        IdentitiesFile::parse(text)?.build("devstoreaccount1")
    }

    #[test]
    fn the_documented_example_parses() {
        let doc = include_str!("identities_file.rs");
        let start = doc.find("//! {").unwrap();
        let end = doc[start..].find("//! ```").unwrap();
        let text: String = doc[start..start + end]
            .lines()
            .map(|l| l.trim_start_matches("//!"))
            .collect::<Vec<_>>()
            .join("\n")
            .replace("base64...", "a2V5");
        let built = build(&text).unwrap();
        let trainer = &built.s3.grants["trainer"];
        assert!(trainer.allows_object(Action::Read, "datasets", "train/x"));
        assert!(!trainer.allows_object(Action::Read, "datasets", "test/x"));
        assert!(
            !built
                .azure
                .sas_grants
                .allows_object(Action::Write, "datasets", "x")
        );
        assert!(built.azure.public.allows_listing("open-data", ""));
    }

    #[test]
    fn a_key_without_grants_may_do_everything_and_an_empty_list_nothing() {
        let built = build(
            r#"{"s3": [{"access_key": "a", "secret_key": "s"},
                       {"access_key": "b", "secret_key": "s", "grants": []}]}"#,
        )
        .unwrap();
        assert_eq!(built.s3.grants["a"], Grants::everything());
        assert!(built.s3.grants["b"].is_empty());
    }

    #[test]
    fn mistakes_are_refused_with_what_is_wrong() {
        for (text, says) in [
            (
                r#"{"s3": [{"access_key": "a", "secret_key": "s", "grants": [{"bucket": "b", "actions": ["fly"]}]}]}"#,
                "unknown action 'fly'",
            ),
            (
                r#"{"s3": [{"access_key": "a", "secret_key": "s", "grants": [{"bucket": "b", "actions": []}]}]}"#,
                "has no actions",
            ),
            (
                r#"{"s3": [{"access_key": "a", "secret_key": "s", "grants": [{"bucket": "b/c", "actions": ["read"]}]}]}"#,
                "bucket or container name",
            ),
            (
                r#"{"public": [{"bucket": "b", "actions": ["read", "write"]}]}"#,
                "only read and list may be public",
            ),
            (
                r#"{"s3": [{"access_key": "a", "secret_key": "s"}, {"access_key": "a", "secret_key": "t"}]}"#,
                "given twice",
            ),
            (r#"{"s3": [], "grant": []}"#, "unknown field"),
            (r#"{"anonymous": "maybe"}"#, "unknown anonymous access"),
        ] {
            let e = build(text).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.message().contains(says), "{text}: {}", e.message());
        }
    }
}
