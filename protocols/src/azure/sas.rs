//! Azure shared access signatures: service SAS (`sr=c` or `sr=b`) and account SAS
//! (`ss`, `srt`), verified against the account key, their time window, protocol, and the
//! permission the operation needs; and generated, for tests and tools.
//!
//! Supported signed versions: 2015-04-05 and later (the string to sign grew fields in
//! 2018-11-09 and 2020-12-06; each layout is built here). User delegation SAS needs an
//! Entra ID token service and is rejected.

use std::net::IpAddr;
use std::time::SystemTime;

use super::request::AzureOperation;
use super::shared_key::AccountKey;
use crate::dates::{format_sas_time, parse_sas_time};
use crate::error::{Error, ErrorKind, Result};
use crate::s3::request::QueryParams;
use crate::s3::sigv4::constant_time_eq;
use crate::uri_encoding::encode_strict;

/// The SAS fields of a query string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SasToken {
    fields: Vec<(String, String)>,
}

impl SasToken {
    /// Extracts a SAS from a request's query; `None` when it carries no `sig`.
    pub fn from_query(query: &QueryParams) -> Option<SasToken> {
        query.get("sig")?;
        Some(SasToken {
            fields: query.0.clone(),
        })
    }

    fn get(&self, name: &str) -> &str {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }

    /// Whether this is an account SAS (it names services, not a resource).
    pub fn is_account_sas(&self) -> bool {
        !self.get("ss").is_empty() && self.get("sr").is_empty()
    }
}

/// What a verification needs to know about the request.
#[derive(Debug, Clone, Copy)]
pub struct SasRequest<'a> {
    /// The storage account.
    pub account: &'a str,
    /// Container, if the request addresses one.
    pub container: Option<&'a str>,
    /// Blob, if the request addresses one.
    pub blob: Option<&'a str>,
    /// The operation.
    pub operation: AzureOperation,
    /// Whether the request arrived over HTTPS.
    pub https: bool,
    /// The client's address, for `sip`.
    pub client_ip: Option<IpAddr>,
}

fn auth_failed(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::SignatureDoesNotMatch, msg)
}

/// What a verified SAS allows, beyond the operation itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SasScope {
    /// The write may only create: a Put Blob granted by `c` (create) without `w`
    /// (write), which must not replace an existing blob (the red-team review's RT-05).
    pub create_only: bool,
}

/// Verifies a SAS for a request at time `now`, and says what it allows.
///
/// # Errors
/// [`ErrorKind::SignatureDoesNotMatch`] for a bad signature or an unsupported layout,
/// [`ErrorKind::ExpiredRequest`] outside `st`..`se`, [`ErrorKind::PermissionMismatch`]
/// when `sp`, `srt`, `ss` or the signed resource do not cover the operation,
/// [`ErrorKind::AccessDenied`] for the wrong protocol or client address.
pub fn verify(
    token: &SasToken,
    key: &AccountKey,
    req: &SasRequest<'_>,
    now: SystemTime,
) -> Result<SasScope> {
    let version = token.get("sv");
    if version < "2015-04-05" {
        return Err(auth_failed(format!(
            "signed version '{version}' is not supported"
        )));
    }
    if !token.get("skoid").is_empty() {
        return Err(Error::new(
            ErrorKind::NotImplemented,
            "user delegation SAS is not supported",
        ));
    }
    let sts = if token.is_account_sas() {
        account_string_to_sign(token, req.account)
    } else {
        service_string_to_sign(token, &canonical_resource(token, req)?)
    };
    let expected = key.sign(&sts);
    if !constant_time_eq(expected.as_bytes(), token.get("sig").as_bytes()) {
        return Err(auth_failed(format!(
            "Signature did not match. String to sign used was {}",
            sts.escape_debug()
        )));
    }
    check_window(token, now)?;
    check_protocol_and_ip(token, req)?;
    check_permissions(token, req)
}

/// `/blob/<account>/<container>[/<blob>]` for the resource the token was signed for.
fn canonical_resource(token: &SasToken, req: &SasRequest<'_>) -> Result<String> {
    let container = req.container.ok_or_else(|| {
        Error::new(
            ErrorKind::PermissionMismatch,
            "a service SAS cannot list containers",
        )
    })?;
    match token.get("sr") {
        "c" => Ok(format!("/blob/{}/{container}", req.account)),
        "b" => {
            let blob = req.blob.ok_or_else(|| {
                Error::new(
                    ErrorKind::PermissionMismatch,
                    "a blob SAS only grants access to its blob",
                )
            })?;
            Ok(format!("/blob/{}/{container}/{blob}", req.account))
        }
        other => Err(auth_failed(format!(
            "signed resource '{other}' is not supported"
        ))),
    }
}

fn service_string_to_sign(t: &SasToken, resource: &str) -> String {
    let v = t.get("sv");
    let mut fields: Vec<&str> = vec![
        t.get("sp"),
        t.get("st"),
        t.get("se"),
        resource,
        t.get("si"),
        t.get("sip"),
        t.get("spr"),
        v,
    ];
    if v >= "2018-11-09" {
        fields.push(t.get("sr"));
        fields.push(t.get("snapshot"));
    }
    if v >= "2020-12-06" {
        fields.push(t.get("ses"));
    }
    fields.extend([
        t.get("rscc"),
        t.get("rscd"),
        t.get("rsce"),
        t.get("rscl"),
        t.get("rsct"),
    ]);
    fields.join("\n")
}

fn account_string_to_sign(t: &SasToken, account: &str) -> String {
    let mut fields: Vec<&str> = vec![
        account,
        t.get("sp"),
        t.get("ss"),
        t.get("srt"),
        t.get("st"),
        t.get("se"),
        t.get("sip"),
        t.get("spr"),
        t.get("sv"),
    ];
    if t.get("sv") >= "2020-12-06" {
        fields.push(t.get("ses"));
    }
    let mut s = fields.join("\n");
    s.push('\n');
    s
}

fn check_window(t: &SasToken, now: SystemTime) -> Result<()> {
    let expiry = parse_sas_time(t.get("se"))
        .map_err(|_| auth_failed("se (signed expiry) is missing or invalid"))?;
    if now >= expiry {
        return Err(Error::new(
            ErrorKind::ExpiredRequest,
            "Signed expiry time has passed",
        ));
    }
    if !t.get("st").is_empty() {
        let start =
            parse_sas_time(t.get("st")).map_err(|_| auth_failed("st (signed start) is invalid"))?;
        if now < start {
            return Err(Error::new(
                ErrorKind::ExpiredRequest,
                "Signed start time is in the future",
            ));
        }
    }
    Ok(())
}

fn check_protocol_and_ip(t: &SasToken, req: &SasRequest<'_>) -> Result<()> {
    if t.get("spr") == "https" && !req.https {
        return Err(Error::new(
            ErrorKind::AccessDenied,
            "This request is not authorized to perform this operation using this protocol.",
        ));
    }
    let sip = t.get("sip");
    if !sip.is_empty() {
        let allowed = req.client_ip.is_some_and(|ip| ip_in_range(ip, sip));
        if !allowed {
            return Err(Error::new(
                ErrorKind::AccessDenied,
                "This request is not authorized to perform this operation from this address.",
            ));
        }
    }
    Ok(())
}

fn ip_in_range(ip: IpAddr, range: &str) -> bool {
    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
    match (lo.parse::<IpAddr>(), hi.parse::<IpAddr>()) {
        (Ok(IpAddr::V4(lo)), Ok(IpAddr::V4(hi))) => match ip {
            IpAddr::V4(ip) => lo <= ip && ip <= hi,
            IpAddr::V6(ip) => ip.to_ipv4_mapped().is_some_and(|ip| lo <= ip && ip <= hi),
        },
        (Ok(lo), Ok(hi)) => lo <= ip && ip <= hi,
        _ => false,
    }
}

fn check_permissions(t: &SasToken, req: &SasRequest<'_>) -> Result<SasScope> {
    let op = req.operation;
    // A service SAS reaches a container's blobs and its listing, never the container
    // itself: `d` deletes blobs and `c` creates blobs, not containers (SEC-10).
    if !t.is_account_sas()
        && matches!(
            op,
            AzureOperation::CreateContainer
                | AzureOperation::DeleteContainer
                | AzureOperation::GetContainerProperties
        )
    {
        return Err(Error::new(
            ErrorKind::PermissionMismatch,
            "This request is not authorized to perform this operation using this permission: a service SAS cannot create, delete or read a container.",
        ));
    }
    let needed = op.sas_permission();
    let sp = t.get("sp");
    // Creating a blob is allowed by `c` as well as `w`; `c` alone creates only.
    let create_only =
        needed == 'w' && op == AzureOperation::PutBlob && sp.contains('c') && !sp.contains('w');
    let granted = sp.contains(needed) || create_only;
    if !granted {
        return Err(Error::new(
            ErrorKind::PermissionMismatch,
            format!(
                "This request is not authorized to perform this operation using this permission ('{needed}' is needed)."
            ),
        ));
    }
    if t.is_account_sas() {
        if !t.get("ss").contains('b') {
            return Err(Error::new(
                ErrorKind::PermissionMismatch,
                "the account SAS does not cover the blob service",
            ));
        }
        if !t.get("srt").contains(op.sas_resource_type()) {
            return Err(Error::new(
                ErrorKind::PermissionMismatch,
                "the account SAS does not cover this resource type",
            ));
        }
    }
    Ok(SasScope { create_only })
}

/// What a generated SAS grants.
#[derive(Debug, Clone)]
pub struct SasGrant<'a> {
    /// Storage account.
    pub account: &'a str,
    /// Container.
    pub container: &'a str,
    /// Blob, for a blob SAS; `None` for a container SAS.
    pub blob: Option<&'a str>,
    /// Permission letters, e.g. `r`, `rl`, `racwd`.
    pub permissions: &'a str,
    /// Optional start.
    pub start: Option<SystemTime>,
    /// Expiry.
    pub expiry: SystemTime,
    /// Signed version, e.g. `2025-01-05`.
    pub version: &'a str,
}

/// Generates a service SAS query string (without `?`).
pub fn generate_service_sas(grant: &SasGrant<'_>, key: &AccountKey) -> String {
    let sr = if grant.blob.is_some() { "b" } else { "c" };
    let mut fields: Vec<(String, String)> = vec![("sv".into(), grant.version.into())];
    if let Some(st) = grant.start {
        fields.push(("st".into(), format_sas_time(st)));
    }
    fields.push(("se".into(), format_sas_time(grant.expiry)));
    fields.push(("sr".into(), sr.into()));
    fields.push(("sp".into(), grant.permissions.into()));
    let token = SasToken {
        fields: fields.clone(),
    };
    let resource = match grant.blob {
        Some(b) => format!("/blob/{}/{}/{b}", grant.account, grant.container),
        None => format!("/blob/{}/{}", grant.account, grant.container),
    };
    fields.push((
        "sig".into(),
        key.sign(&service_string_to_sign(&token, &resource)),
    ));
    fields
        .iter()
        .map(|(k, v)| format!("{k}={}", encode_strict(v)))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    const KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

    fn t(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(s)
    }

    fn req(blob: Option<&'static str>, operation: AzureOperation) -> SasRequest<'static> {
        SasRequest {
            account: "acct",
            container: Some("c"),
            blob,
            operation,
            https: false,
            client_ip: None,
        }
    }

    fn token(q: &str) -> SasToken {
        SasToken::from_query(&QueryParams::parse(q)).expect("has sig")
    }

    #[test]
    fn generated_blob_sas_verifies_within_its_scope() {
        let key = AccountKey::from_base64(KEY).expect("key");
        let grant = SasGrant {
            account: "acct",
            container: "c",
            blob: Some("dir/a b"),
            permissions: "r",
            start: Some(t(1000)),
            expiry: t(2000),
            version: "2025-01-05",
        };
        let q = generate_service_sas(&grant, &key);
        let tok = token(&q);
        let ok = req(Some("dir/a b"), AzureOperation::GetBlob);
        verify(&tok, &key, &ok, t(1500)).expect("valid");
        let kind = |r: &SasRequest<'_>, now| verify(&tok, &key, r, now).map_err(|e| e.kind()).err();
        assert_eq!(kind(&ok, t(2000)), Some(ErrorKind::ExpiredRequest));
        assert_eq!(kind(&ok, t(999)), Some(ErrorKind::ExpiredRequest));
        assert_eq!(
            kind(&req(Some("other"), AzureOperation::GetBlob), t(1500)),
            Some(ErrorKind::SignatureDoesNotMatch)
        );
        assert_eq!(
            kind(&req(Some("dir/a b"), AzureOperation::PutBlob), t(1500)),
            Some(ErrorKind::PermissionMismatch)
        );
        let forged = token(&q.replace("sp=r", "sp=rw"));
        assert_eq!(
            verify(
                &forged,
                &key,
                &req(Some("dir/a b"), AzureOperation::PutBlob),
                t(1500)
            )
            .map_err(|e| e.kind())
            .err(),
            Some(ErrorKind::SignatureDoesNotMatch)
        );
    }

    #[test]
    fn container_sas_covers_listing_and_every_blob() {
        let key = AccountKey::from_base64(KEY).expect("key");
        let grant = SasGrant {
            account: "acct",
            container: "c",
            blob: None,
            permissions: "rl",
            start: None,
            expiry: t(2000),
            version: "2019-12-12",
        };
        let tok = token(&generate_service_sas(&grant, &key));
        verify(&tok, &key, &req(None, AzureOperation::ListBlobs), t(10)).expect("list");
        verify(&tok, &key, &req(Some("x"), AzureOperation::GetBlob), t(10)).expect("read");
    }

    /// SEC-10: a container SAS with every permission still cannot touch the container.
    #[test]
    fn a_service_sas_never_creates_deletes_or_reads_a_container() {
        let key = AccountKey::from_base64(KEY).expect("key");
        let grant = SasGrant {
            account: "acct",
            container: "c",
            blob: None,
            permissions: "racwdl",
            start: None,
            expiry: t(2000),
            version: "2019-12-12",
        };
        let tok = token(&generate_service_sas(&grant, &key));
        for op in [
            AzureOperation::CreateContainer,
            AzureOperation::DeleteContainer,
            AzureOperation::GetContainerProperties,
        ] {
            assert_eq!(
                verify(&tok, &key, &req(None, op), t(10)).map_err(|e| e.kind()),
                Err(ErrorKind::PermissionMismatch),
                "{op:?}"
            );
        }
        verify(
            &tok,
            &key,
            &req(Some("x"), AzureOperation::DeleteBlob),
            t(10),
        )
        .expect("blobs");
    }

    #[test]
    fn account_sas_layout_and_resource_types() {
        let key = AccountKey::from_base64(KEY).expect("key");
        let unsigned = "sv=2021-08-06&ss=b&srt=sco&sp=rl&se=1970-01-01T00:33:20Z&spr=https,http";
        let tok = token(&format!("{unsigned}&sig=x"));
        let sig = key.sign(&account_string_to_sign(&tok, "acct"));
        assert_eq!(
            account_string_to_sign(&tok, "acct"),
            "acct\nrl\nb\nsco\n\n1970-01-01T00:33:20Z\n\nhttps,http\n2021-08-06\n\n"
        );
        let tok = token(&format!("{unsigned}&sig={}", encode_strict(&sig)));
        verify(
            &tok,
            &key,
            &SasRequest {
                container: None,
                ..req(None, AzureOperation::ListContainers)
            },
            t(10),
        )
        .expect("list containers");
        assert_eq!(
            verify(
                &tok,
                &key,
                &req(Some("b"), AzureOperation::DeleteBlob),
                t(10)
            )
            .map_err(|e| e.kind())
            .err(),
            Some(ErrorKind::PermissionMismatch)
        );
    }

    #[test]
    fn https_only_and_ip_ranges() {
        assert!(ip_in_range(
            "10.0.0.5".parse().expect("ip"),
            "10.0.0.1-10.0.0.9"
        ));
        assert!(!ip_in_range(
            "10.0.1.5".parse().expect("ip"),
            "10.0.0.1-10.0.0.9"
        ));
        assert!(ip_in_range("127.0.0.1".parse().expect("ip"), "127.0.0.1"));
        let key = AccountKey::from_base64(KEY).expect("key");
        let unsigned = "sv=2021-08-06&sr=c&sp=r&se=1970-01-01T00:33:20Z&spr=https";
        let tok = token(&format!("{unsigned}&sig=x"));
        let sig = key.sign(&service_string_to_sign(&tok, "/blob/acct/c"));
        let tok = token(&format!("{unsigned}&sig={}", encode_strict(&sig)));
        assert_eq!(
            verify(&tok, &key, &req(Some("b"), AzureOperation::GetBlob), t(10))
                .map_err(|e| e.kind())
                .err(),
            Some(ErrorKind::AccessDenied)
        );
        let https = SasRequest {
            https: true,
            ..req(Some("b"), AzureOperation::GetBlob)
        };
        verify(&tok, &key, &https, t(10)).expect("https is fine");
    }
}
