//! The co-located fast path's discovery: a worker may offer a Unix socket to readers on
//! its own host, where it hands them block-file descriptors instead of sending bytes
//! over TCP. A reader takes that socket only when the worker's host identity equals its
//! own, which means both processes see the same files, so the path names the same socket.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::CoordinatorError;

/// Longest local socket path accepted, in bytes (`sun_path` holds 108 with its NUL).
pub const MAX_LOCAL_SOCKET_LEN: usize = 107;

/// Where a worker's local socket is, for readers on the same host. Both fields empty
/// (the default, and what a worker that predates them sends): none offered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalEndpoint {
    /// The worker's [`host_identity`]: up to 128 characters of `[A-Za-z0-9._-]`.
    #[serde(default)]
    pub host: String,
    /// The Unix socket's absolute path, at most [`MAX_LOCAL_SOCKET_LEN`] bytes.
    #[serde(default)]
    pub socket: String,
}

impl LocalEndpoint {
    /// Checks both fields: both empty, or a host label and an absolute path.
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidRegistration`] saying which field is wrong.
    pub fn validate(&self) -> Result<(), CoordinatorError> {
        let invalid = |m: &str| Err(CoordinatorError::InvalidRegistration(m.to_owned()));
        if self.host.is_empty() && self.socket.is_empty() {
            return Ok(());
        }
        if self.host.is_empty()
            || self.host.len() > 128
            || !self
                .host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return invalid("local.host must be 1 to 128 characters of [A-Za-z0-9._-]");
        }
        if !self.socket.starts_with('/')
            || self.socket.len() > MAX_LOCAL_SOCKET_LEN
            || self.socket.chars().any(char::is_control)
        {
            return invalid(
                "local.socket must be an absolute path of at most 107 bytes without control characters",
            );
        }
        Ok(())
    }

    /// The socket's path when the worker runs where `here` (this process's
    /// [`host_identity`]) says this process runs; `None` otherwise.
    pub fn path_on(&self, here: &str) -> Option<&Path> {
        (!self.socket.is_empty() && !here.is_empty() && self.host == here)
            .then(|| Path::new(&self.socket))
    }
}

/// This process's host identity for the local socket: the kernel's boot id and the
/// mount namespace's inode. Two processes share it only when they run on the same
/// boot of the same machine and see the same file tree; containers with their own
/// mount namespaces on one host differ, and read over TCP. `None` when either cannot
/// be read (no `/proc`): then no local socket is used.
pub fn host_identity() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let boot = boot.trim();
    if boot.is_empty() || !boot.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return None;
    }
    let mount_ns = std::fs::metadata("/proc/self/ns/mnt").ok()?.ino();
    Some(format!("{boot}.mnt{mount_ns}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_endpoint_is_used_only_on_the_same_host() {
        let here = host_identity().unwrap();
        let local = LocalEndpoint {
            host: here.clone(),
            socket: "/run/talon/w1.sock".into(),
        };
        local.validate().unwrap();
        assert_eq!(local.path_on(&here), Some(Path::new("/run/talon/w1.sock")));
        assert_eq!(local.path_on("another-host.mnt1"), None);
        assert_eq!(local.path_on(""), None);
        assert_eq!(LocalEndpoint::default().path_on(&here), None);
        assert_eq!(host_identity().unwrap(), here, "the identity is stable");
    }

    #[test]
    fn bad_endpoints_are_refused() {
        let ok = LocalEndpoint {
            host: "b00t.mnt4026531840".into(),
            socket: "/tmp/x.sock".into(),
        };
        ok.validate().unwrap();
        LocalEndpoint::default().validate().unwrap();
        for bad in [
            LocalEndpoint {
                socket: "relative.sock".into(),
                ..ok.clone()
            },
            LocalEndpoint {
                socket: format!("/{}", "a".repeat(MAX_LOCAL_SOCKET_LEN)),
                ..ok.clone()
            },
            LocalEndpoint {
                socket: "/tmp/a\nb".into(),
                ..ok.clone()
            },
            LocalEndpoint {
                host: "has space".into(),
                ..ok.clone()
            },
            LocalEndpoint {
                host: String::new(),
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?} was accepted");
        }
    }
}
