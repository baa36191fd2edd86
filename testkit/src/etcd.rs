//! A real etcd cluster for tests: three `etcd` processes (Debian's `etcd-server`) on
//! loopback, each with its own data folder, killed when dropped; optionally serving its
//! clients over TLS only, with client certificates required (certificates made by the
//! `openssl` command for the test).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One member of an [`EtcdCluster`].
#[derive(Debug)]
pub struct EtcdMember {
    /// Its name in the cluster.
    pub name: String,
    /// `127.0.0.1:PORT` of its client API.
    pub client: String,
    child: Option<Child>,
}

/// A three-member etcd cluster on loopback.
#[derive(Debug)]
pub struct EtcdCluster {
    /// The members, in start order.
    pub members: Vec<EtcdMember>,
    /// The TLS files when it serves clients over TLS.
    pub tls: Option<TlsFiles>,
    _dir: tempfile::TempDir,
}

/// A test CA and what it signed, as PEM files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA certificate.
    pub ca: PathBuf,
    /// etcd's certificate (for 127.0.0.1) and key.
    pub server: (PathBuf, PathBuf),
    /// A client certificate the CA signed, and its key.
    pub client: (PathBuf, PathBuf),
    /// A client certificate signed by another CA, and its key.
    pub stranger: (PathBuf, PathBuf),
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("openssl is required for this test (apt-get install openssl): {e}")
        });
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes `<name>.crt` and `<name>.key` in `dir`: a self-signed CA when `ca` is `None`,
/// otherwise a certificate signed by CA `ca` with the extensions `ext`.
fn certificate(dir: &Path, name: &str, ca: Option<&str>, ext: &str) -> (PathBuf, PathBuf) {
    let (crt, key) = (format!("{name}.crt"), format!("{name}.key"));
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let subject = format!("/CN=talon-test-{name}");
    match ca {
        None => {
            let mut args = vec![
                "req", "-x509", "-days", "2", "-subj", &subject, "-keyout", &key,
            ];
            args.extend(ec);
            args.extend(["-out", &crt]);
            openssl(dir, &args);
        }
        Some(ca) => {
            let csr = format!("{name}.csr");
            let extfile = format!("{name}.ext");
            std::fs::write(dir.join(&extfile), ext).unwrap_or_else(|e| panic!("{e}"));
            let mut args = vec!["req", "-subj", &subject, "-keyout", &key];
            args.extend(ec);
            args.extend(["-out", &csr]);
            openssl(dir, &args);
            let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-days",
                    "2",
                    "-in",
                    &csr,
                    "-CA",
                    &ca_crt,
                    "-CAkey",
                    &ca_key,
                    "-CAcreateserial",
                    "-extfile",
                    &extfile,
                    "-out",
                    &crt,
                ],
            );
        }
    }
    (dir.join(crt), dir.join(key))
}

impl TlsFiles {
    /// A CA, a certificate for etcd on 127.0.0.1, a client certificate, and a client
    /// certificate of another CA, in `dir`.
    fn make(dir: &Path) -> TlsFiles {
        let (ca, _) = certificate(dir, "ca", None, "");
        let server = certificate(
            dir,
            "server",
            Some("ca"),
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
        );
        let client = certificate(dir, "client", Some("ca"), "extendedKeyUsage=clientAuth\n");
        certificate(dir, "other-ca", None, "");
        let stranger = certificate(
            dir,
            "stranger",
            Some("other-ca"),
            "extendedKeyUsage=clientAuth\n",
        );
        TlsFiles {
            ca,
            server,
            client,
            stranger,
        }
    }

    /// The coordinator's TLS settings with the client certificate the CA signed.
    pub fn coordinator(&self) -> talon_coordinator::etcd::EtcdTls {
        talon_coordinator::etcd::EtcdTls {
            ca: self.ca.clone(),
            client: Some(self.client.clone()),
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// The `etcd` binary: `TALON_ETCD` or the first `etcd` on the path.
fn etcd_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("TALON_ETCD") {
        return PathBuf::from(p);
    }
    for dir in ["/usr/bin", "/usr/local/bin", "/usr/sbin"] {
        let p = PathBuf::from(dir).join("etcd");
        if p.is_file() {
            return p;
        }
    }
    panic!("etcd is required for this test: apt-get install etcd-server (or set TALON_ETCD)");
}

impl EtcdCluster {
    /// Starts three members and waits until the cluster answers a write.
    ///
    /// # Panics
    /// When etcd is missing or the cluster does not become healthy in 30 s.
    pub async fn start() -> EtcdCluster {
        EtcdCluster::start_with(false).await
    }

    /// Starts three members that serve clients over TLS only and require a client
    /// certificate their CA signed ([`EtcdCluster::tls`]); peers talk in clear on
    /// loopback.
    ///
    /// # Panics
    /// As [`EtcdCluster::start`], and when `openssl` is missing.
    pub async fn start_tls() -> EtcdCluster {
        EtcdCluster::start_with(true).await
    }

    async fn start_with(tls: bool) -> EtcdCluster {
        // The ports are picked free and then bound by etcd, so a port can be taken in
        // between (by another test's etcd, say): that member exits, and a cluster of
        // the other two would still answer. Such a cluster is discarded and another
        // started on other ports.
        const ATTEMPTS: usize = 3;
        for attempt in 1..=ATTEMPTS {
            let mut cluster = EtcdCluster::spawn(tls);
            match cluster.wait_every_member().await {
                Ok(()) => return cluster,
                Err(why) if attempt < ATTEMPTS => {
                    eprintln!("etcd cluster attempt {attempt} discarded: {why}");
                }
                Err(why) => panic!("the etcd cluster did not start: {why}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// Starts three members on fresh ports, without waiting for them.
    fn spawn(tls: bool) -> EtcdCluster {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let tls = tls.then(|| TlsFiles::make(dir.path()));
        let scheme = if tls.is_some() { "https" } else { "http" };
        let binary = etcd_binary();
        let names = ["e1", "e2", "e3"];
        let peers: Vec<(String, u16, u16)> = names
            .iter()
            .map(|n| ((*n).to_owned(), free_port(), free_port()))
            .collect();
        let initial = peers
            .iter()
            .map(|(n, _, peer)| format!("{n}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let members = peers
            .iter()
            .map(|(name, client, peer)| {
                let log = std::fs::File::create(dir.path().join(format!("{name}.log")))
                    .unwrap_or_else(|e| panic!("etcd log: {e}"));
                let mut command = Command::new(&binary);
                if let Some(tls) = &tls {
                    command
                        .arg("--cert-file")
                        .arg(&tls.server.0)
                        .arg("--key-file")
                        .arg(&tls.server.1)
                        .arg("--trusted-ca-file")
                        .arg(&tls.ca)
                        .arg("--client-cert-auth");
                }
                let child = command
                    .args(["--name", name])
                    .arg("--data-dir")
                    .arg(dir.path().join(name))
                    .arg(format!(
                        "--listen-client-urls={scheme}://127.0.0.1:{client}"
                    ))
                    .arg(format!(
                        "--advertise-client-urls={scheme}://127.0.0.1:{client}"
                    ))
                    .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
                    .arg(format!(
                        "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
                    ))
                    .arg(format!("--initial-cluster={initial}"))
                    .args(["--initial-cluster-state", "new"])
                    .args(["--initial-cluster-token", "talon-test"])
                    // Fast elections: a killed member's leadership moves in well under 1 s.
                    .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
                EtcdMember {
                    name: name.clone(),
                    client: format!("127.0.0.1:{client}"),
                    child: Some(child),
                }
            })
            .collect();
        EtcdCluster {
            members,
            tls,
            _dir: dir,
        }
    }

    /// The client endpoints of the members still running, for `--state etcd://…`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client.clone()).collect()
    }

    /// `etcd://` URL of every member.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoints().join(","))
    }

    /// Kills member `i` (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits until a write through every member succeeds (each is up, on its own
    /// port, and in the cluster), for at most 30 s. An error says why not: a member
    /// exited (its port was taken, for example) or the time ran out.
    async fn wait_every_member(&mut self) -> Result<(), String> {
        let mut http = reqwest::Client::builder();
        let mut scheme = "http";
        if let Some(tls) = &self.tls {
            scheme = "https";
            let read =
                |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let mut identity = read(&tls.client.0);
            identity.extend(read(&tls.client.1));
            http = http
                .add_root_certificate(
                    reqwest::Certificate::from_pem(&read(&tls.ca))
                        .unwrap_or_else(|e| panic!("{e}")),
                )
                .identity(reqwest::Identity::from_pem(&identity).unwrap_or_else(|e| panic!("{e}")));
        }
        let http = http.build().unwrap_or_else(|e| panic!("{e}"));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            for m in &mut self.members {
                if let Some(child) = m.child.as_mut()
                    && let Ok(Some(status)) = child.try_wait()
                {
                    return Err(format!("member {} exited: {status}", m.name));
                }
            }
            let mut answered = 0;
            for c in self.endpoints() {
                let put = http
                    .post(format!("{scheme}://{c}/v3/kv/put"))
                    .body(r#"{"key":"aGVhbHRo","value":"b2s="}"#)
                    .timeout(Duration::from_secs(1))
                    .send()
                    .await;
                if put.is_ok_and(|r| r.status().is_success()) {
                    answered += 1;
                }
            }
            if answered == self.members.len() {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "{answered} of {} members accepted a write in 30 s",
                    self.members.len()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
