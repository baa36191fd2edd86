//! Origins nobody here wrote, started as real processes on loopback for a test: moto's
//! S3 server (PyPI `moto[server]`) and Azurite's Blob service (npm `azurite`). The
//! README's test command installs both (`scripts/test.sh`: moto into the SDK venv,
//! Azurite with `npm ci` in `tests/sdk/js`); elsewhere name them with `TALON_MOTO_SERVER` and
//! `TALON_AZURITE_BLOB`.
//!
//! Where one is not installed, [`IndependentOrigin::start`] gives `None` and the test
//! says so on stderr, unless `TALON_REQUIRE_INDEPENDENT_ORIGINS` is set (the test
//! command sets it): then a missing server fails the test, so CI cannot pass without
//! running them.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use talon_protocols::azure::shared_key::AccountKey;
use talon_protocols::origin::{OriginClient, OriginConfig};
use talon_protocols::s3::sigv4::S3Credentials;

/// Azurite's (and the Azure emulator's) published development account; its key is
/// [`talon_origin_stub::EMULATOR_AZURE_KEY`].
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OriginKind {
    /// moto's S3 server.
    Moto,
    /// Azurite's Blob service.
    Azurite,
}

/// A running independent origin; killed on drop.
pub struct IndependentOrigin {
    kind: OriginKind,
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

fn binary(kind: OriginKind) -> Option<PathBuf> {
    let (var, default) = match kind {
        OriginKind::Moto => ("TALON_MOTO_SERVER", "target/sdk-venv/bin/moto_server"),
        OriginKind::Azurite => (
            "TALON_AZURITE_BLOB",
            "tests/sdk/js/node_modules/.bin/azurite-blob",
        ),
    };
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(default));
    path.is_file().then_some(path)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl IndependentOrigin {
    /// Starts the server on a free loopback port and waits until it accepts
    /// connections; `None` when it is not installed (see the module's doc).
    ///
    /// # Panics
    /// When it is installed but does not come up within a minute, or is required and
    /// missing.
    pub fn start(kind: OriginKind) -> Option<IndependentOrigin> {
        let Some(bin) = binary(kind) else {
            let required = std::env::var_os("TALON_REQUIRE_INDEPENDENT_ORIGINS").is_some();
            assert!(
                !required,
                "{kind:?} is required (TALON_REQUIRE_INDEPENDENT_ORIGINS) but not installed: run scripts/test.sh once"
            );
            eprintln!("SKIPPED: {kind:?} is not installed (scripts/test.sh installs it)");
            return None;
        };
        let dir = tempfile::tempdir().expect("a temporary folder");
        // A port picked here may be taken before the server binds it: try a few.
        for _ in 0..5 {
            let port = free_port();
            let mut cmd = Command::new(&bin);
            match kind {
                OriginKind::Moto => {
                    cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
                }
                OriginKind::Azurite => {
                    cmd.args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
                        .arg("--location")
                        .arg(dir.path())
                        .args(["--silent", "--skipApiVersionCheck"]);
                }
            }
            let mut child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // exited: most likely the port was taken; try another
                }
                // Ready once it answers a request, not merely accepts a connection:
                // moto loads its S3 backend on the first request, which on a loaded
                // machine outlasts a client's timeout.
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                    && answers_http(addr)
                {
                    return Some(IndependentOrigin {
                        kind,
                        child,
                        addr,
                        _dir: dir,
                    });
                }
                assert!(
                    Instant::now() < deadline,
                    "{kind:?} did not accept connections within 60 s"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("{kind:?} did not start on any of five ports");
    }

    /// A client for this origin, with the credentials it accepts (moto any, Azurite its
    /// development account).
    ///
    /// # Panics
    /// Never for these configurations.
    pub fn client(&self) -> OriginClient {
        let config = match self.kind {
            OriginKind::Moto => OriginConfig::S3 {
                endpoint: format!("http://{}", self.addr),
                region: "us-east-1".into(),
                credentials: Some(S3Credentials {
                    access_key: "AKIAMOTOTESTING00001".into(),
                    secret_key: "moto-accepts-any-secret".into(),
                    session_token: None,
                }),
                virtual_hosted: false,
            },
            OriginKind::Azurite => OriginConfig::Azure {
                endpoint: format!("http://{}/{AZURITE_ACCOUNT}", self.addr),
                account: AZURITE_ACCOUNT.into(),
                key: Some(
                    AccountKey::from_base64(talon_origin_stub::EMULATOR_AZURE_KEY)
                        .expect("the published key"),
                ),
                sas: None,
            },
        };
        OriginClient::new(config).expect("an origin client")
    }
}

impl Drop for IndependentOrigin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the server at `addr` answers an HTTP request (any status) within 60 s.
fn answers_http(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    if stream
        .write_all(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 5];
    stream.read_exact(&mut head).is_ok() && &head == b"HTTP/"
}
