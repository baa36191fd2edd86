//! Authenticating an incoming Azure Blob request: Shared Key or SAS against the account
//! key, or anonymous when the server allows it. Shared by the origin stub and the
//! gateway.

use std::net::IpAddr;
use std::time::SystemTime;

use super::request::AzureRequest;
use super::sas::{self, SasRequest, SasToken};
use super::shared_key::{self, AccountKey, SharedKeyParts};
use crate::access::{Access, Acls, AnonymousAccess, Grants, Open};
use crate::error::{Error, ErrorKind, Result};

/// Who may call a server.
#[derive(Debug, Clone)]
pub struct AzureIdentity {
    /// The storage account served.
    pub account: String,
    /// Its key; `None` means no Shared Key or SAS can be checked, so every request is
    /// anonymous and [`AzureIdentity::anonymous`] alone decides.
    pub key: Option<AccountKey>,
    /// What a Shared Key request may do.
    pub grants: Grants,
    /// What a SAS request may do at most (its own permissions still apply).
    pub sas_grants: Grants,
    /// What requests without Shared Key or SAS may do in every container.
    pub anonymous: AnonymousAccess,
    /// Containers and prefixes requests without Shared Key or SAS may read and list.
    pub public: Grants,
}

impl AzureIdentity {
    /// An account whose key (if any) may do everything, and a SAS whatever it says.
    pub fn unrestricted(
        account: impl Into<String>,
        key: Option<AccountKey>,
        anonymous: AnonymousAccess,
    ) -> AzureIdentity {
        AzureIdentity {
            account: account.into(),
            key,
            grants: Grants::everything(),
            sas_grants: Grants::everything(),
            anonymous,
            public: Grants::NONE,
        }
    }

    /// What an anonymous request may do.
    pub fn anonymous_access<'a>(&'a self, acls: Option<&'a Acls>) -> Access<'a> {
        Access::Anonymous {
            level: self.anonymous,
            open: self.open(acls),
        }
    }

    /// What a Shared Key request may do.
    pub fn key_access<'a>(&'a self, acls: Option<&'a Acls>) -> Access<'a> {
        Access::Granted {
            grants: &self.grants,
            open: self.open(acls),
        }
    }

    /// What a SAS request may do at most.
    pub fn sas_access<'a>(&'a self, acls: Option<&'a Acls>) -> Access<'a> {
        Access::Granted {
            grants: &self.sas_grants,
            open: self.open(acls),
        }
    }

    fn open<'a>(&'a self, acls: Option<&'a Acls>) -> Open<'a> {
        Open {
            public: &self.public,
            acls,
        }
    }
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
#[derive(Debug, Clone, Copy)]
pub struct Authorized<'a> {
    /// Who it is and what it may do.
    pub access: Access<'a>,
    /// What its SAS allows beyond the operation (default for Shared Key and anonymous).
    pub sas: sas::SasScope,
    /// How it proved itself: `sharedkey` or `sas` (of the server's one account); `None`
    /// for an anonymous request.
    pub who: Option<&'static str>,
}

/// Verifies a request and applies the access policy ([`Access::check`]) to what its
/// operation needs ([`AzureRequest::need`]). A copy's source and the containers of a
/// List Containers are checked by the server as it reaches them.
///
/// With no key configured, Shared Key and SAS cannot be checked: every request is
/// anonymous, whatever it carries, and the anonymous policy decides.
///
/// # Errors
/// [`ErrorKind::MissingCredentials`] when neither Shared Key nor SAS is present and
/// anonymous access is refused, [`ErrorKind::AccessDenied`] for another anonymous
/// refusal, [`ErrorKind::PermissionMismatch`] where the grants do not allow it; the
/// Shared Key and SAS errors otherwise.
pub fn authenticate<'a>(
    identity: &'a AzureIdentity,
    acls: Option<&'a Acls>,
    request: &AzureRequest,
    parts: &SharedKeyParts<'_>,
    transport: Transport,
    now: SystemTime,
) -> Result<Authorized<'a>> {
    let authorized = verify_signature(identity, acls, request, parts, transport, now)?;
    authorized
        .access
        .check(request.need())
        .map_err(in_azure_words)?;
    Ok(authorized)
}

/// The policy's refusals with the messages Azure Storage gives them.
pub fn in_azure_words(e: Error) -> Error {
    match e.kind() {
        ErrorKind::MissingCredentials => Error::new(
            ErrorKind::MissingCredentials,
            "Server failed to authenticate the request. Please refer to the information in the www-authenticate header.",
        ),
        ErrorKind::PermissionMismatch => Error::new(
            ErrorKind::PermissionMismatch,
            "This request is not authorized to perform this operation using this permission.",
        ),
        _ => e,
    }
}

fn verify_signature<'a>(
    identity: &'a AzureIdentity,
    acls: Option<&'a Acls>,
    request: &AzureRequest,
    parts: &SharedKeyParts<'_>,
    transport: Transport,
    now: SystemTime,
) -> Result<Authorized<'a>> {
    let plain = |access, who| Authorized {
        access,
        sas: sas::SasScope::default(),
        who,
    };
    let Some(key) = &identity.key else {
        return Ok(plain(identity.anonymous_access(acls), None));
    };
    if let Some((account, signature)) = shared_key::parse_authorization(parts.headers)? {
        shared_key::verify(parts, &identity.account, key, &account, &signature, now)?;
        return Ok(plain(identity.key_access(acls), Some("sharedkey")));
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
            access: identity.sas_access(acls),
            sas: scope,
            who: Some("sas"),
        });
    }
    Ok(plain(identity.anonymous_access(acls), None))
}
