//! Authenticating an incoming Azure Blob request: Shared Key or SAS against the account
//! key, or anonymous when the server allows it. Shared by the origin stub and the
//! gateway.

use std::net::IpAddr;
use std::time::SystemTime;

use super::request::AzureRequest;
use super::sas::{self, SasRequest, SasToken};
use super::shared_key::{self, AccountKey, SharedKeyParts};
use crate::access::{AnonymousAccess, Caller, authorize};
use crate::error::{Error, ErrorKind, Result};

/// Who may call a server.
#[derive(Debug, Clone)]
pub struct AzureIdentity {
    /// The storage account served.
    pub account: String,
    /// Its key; `None` means no Shared Key or SAS can be checked, so every request is
    /// anonymous and [`AzureIdentity::anonymous`] alone decides.
    pub key: Option<AccountKey>,
    /// What requests without Shared Key or SAS may do.
    pub anonymous: AnonymousAccess,
}

/// Where a request came from, for SAS restrictions.
#[derive(Debug, Clone, Copy)]
pub struct Transport {
    /// Whether it arrived over HTTPS.
    pub https: bool,
    /// The client's address.
    pub client_ip: Option<IpAddr>,
}

/// A verified caller, and what its credentials limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authorized {
    /// Who it is.
    pub caller: Caller,
    /// What its SAS allows beyond the operation (default for Shared Key and anonymous).
    pub sas: sas::SasScope,
}

/// Verifies a request and applies the access policy ([`crate::access::authorize`]) to
/// its operation.
///
/// With no key configured, Shared Key and SAS cannot be checked: every request is
/// anonymous, whatever it carries, and the anonymous policy decides.
///
/// # Errors
/// [`ErrorKind::MissingCredentials`] when neither Shared Key nor SAS is present and
/// anonymous access is refused, [`ErrorKind::AccessDenied`] for an anonymous write when
/// it is read-only; the Shared Key and SAS errors otherwise.
pub fn authenticate(
    identity: &AzureIdentity,
    request: &AzureRequest,
    parts: &SharedKeyParts<'_>,
    transport: Transport,
    now: SystemTime,
) -> Result<Authorized> {
    let authorized = verify_signature(identity, request, parts, transport, now)?;
    authorize(
        authorized.caller,
        identity.anonymous,
        request.operation.writes(),
    )
    .map_err(|e| {
        if e.kind() == ErrorKind::MissingCredentials {
            Error::new(
                ErrorKind::MissingCredentials,
                "Server failed to authenticate the request. Please refer to the information in the www-authenticate header.",
            )
        } else {
            e
        }
    })?;
    Ok(authorized)
}

fn verify_signature(
    identity: &AzureIdentity,
    request: &AzureRequest,
    parts: &SharedKeyParts<'_>,
    transport: Transport,
    now: SystemTime,
) -> Result<Authorized> {
    let plain = |caller| Authorized {
        caller,
        sas: sas::SasScope::default(),
    };
    let Some(key) = &identity.key else {
        return Ok(plain(Caller::Anonymous));
    };
    if let Some((account, signature)) = shared_key::parse_authorization(parts.headers)? {
        shared_key::verify(parts, &identity.account, key, &account, &signature, now)?;
        return Ok(plain(Caller::Authenticated));
    }
    if let Some(token) = SasToken::from_query(&request.query) {
        let sas_request = SasRequest {
            account: &identity.account,
            container: request.container.as_deref(),
            blob: request.blob.as_deref(),
            operation: request.operation,
            https: transport.https,
            client_ip: transport.client_ip,
        };
        let scope = sas::verify(&token, key, &sas_request, now)?;
        return Ok(Authorized {
            caller: Caller::Authenticated,
            sas: scope,
        });
    }
    Ok(plain(Caller::Anonymous))
}
