//! A real etcd cluster for tests: three `etcd` processes (Debian's `etcd-server`) on
//! loopback, each with its own data folder, killed when dropped.

use std::net::TcpListener;
use std::path::PathBuf;
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
    _dir: tempfile::TempDir,
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
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
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
                let child = Command::new(&binary)
                    .args(["--name", name])
                    .arg("--data-dir")
                    .arg(dir.path().join(name))
                    .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
                    .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
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
        let cluster = EtcdCluster { members, _dir: dir };
        cluster.wait_healthy().await;
        cluster
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

    /// Waits until a write through any running member succeeds.
    async fn wait_healthy(&self) {
        let http = reqwest::Client::new();
        let clients: Vec<String> = self.endpoints();
        crate::wait_for(
            "the etcd cluster to accept a write",
            Duration::from_secs(30),
            || {
                let http = http.clone();
                let clients = clients.clone();
                async move {
                    for c in &clients {
                        let put = http
                            .post(format!("http://{c}/v3/kv/put"))
                            .body(r#"{"key":"aGVhbHRo","value":"b2s="}"#)
                            .timeout(Duration::from_secs(1))
                            .send()
                            .await;
                        if put.is_ok_and(|r| r.status().is_success()) {
                            return Some(());
                        }
                    }
                    None
                }
            },
        )
        .await;
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
