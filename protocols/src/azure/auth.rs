//! Authenticating an incoming Azure Blob request: Shared Key or SAS against the account
//! key, or anonymous when the server allows it. Shared by the origin stub and the
//! gateway.

use std::net::IpAddr;
use std::time::SystemTime;

use super::request::AzureRequest;
use super::sas::{self, SasRequest, SasToken};
use super::shared_key::{self, AccountKey, SharedKeyParts};
use crate::error::{Error, ErrorKind, Result};

/// Who may call a server.
#[derive(Debug, Clone)]
pub struct AzureIdentity {
    /// The storage account served.
    pub account: String,
    /// Its key; `None` means no Shared Key or SAS can be checked.
    pub key: Option<AccountKey>,
    /// Whether requests without Shared Key or SAS are served.
    pub allow_anonymous: bool,
}

/// Where a request came from, for SAS restrictions.
#[derive(Debug, Clone, Copy)]
pub struct Transport {
    /// Whether it arrived over HTTPS.
    pub https: bool,
    /// The client's address.
    pub client_ip: Option<IpAddr>,
}

/// Verifies a request.
///
/// With no key configured, requests are served only when anonymous access is allowed.
///
/// # Errors
/// [`ErrorKind::MissingCredentials`] when neither Shared Key nor SAS is present and
/// anonymous access is not allowed; the Shared Key and SAS errors otherwise.
pub fn authenticate(
    identity: &AzureIdentity,
    request: &AzureRequest,
    parts: &SharedKeyParts<'_>,
    transport: Transport,
    now: SystemTime,
) -> Result<()> {
    let Some(key) = &identity.key else {
        return Ok(());
    };
    if let Some((account, signature)) = shared_key::parse_authorization(parts.headers)? {
        return shared_key::verify(parts, &identity.account, key, &account, &signature);
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
        return sas::verify(&token, key, &sas_request, now);
    }
    if identity.allow_anonymous {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::MissingCredentials,
        "Server failed to authenticate the request. Please refer to the information in the www-authenticate header.",
    ))
}
