//! Hosts made of Linux network namespaces, for tests that cross a network: each host is
//! a namespace with its own address on one bridge (a switch namespace), and this
//! process reaches all of them through one more veth pair. A host can be cut off the
//! switch and put back ([`Network::cut`], [`Network::heal`]) to make partitions.
//!
//! Needs root (`ip netns`, iproute2). Everything is made under a per-run prefix and
//! removed when the [`Network`] is dropped.

use std::process::Command;

use crate::harness_error::{HarnessError, HarnessResult};

/// Where a part runs: this machine's loopback, or a namespace with its own address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetHost {
    /// The namespace to run in (`None`: this process's own).
    pub netns: Option<String>,
    /// The address its listeners bind.
    pub ip: String,
}

impl NetHost {
    /// This machine's loopback, in this process's namespace.
    pub fn loopback() -> NetHost {
        NetHost {
            netns: None,
            ip: "127.0.0.1".into(),
        }
    }

    /// `ip:0`: a listener on a free port at this host's address.
    pub fn any_port(&self) -> String {
        format!("{}:0", self.ip)
    }
}

/// The `ip` binary (iproute2), looked up where Debian puts it.
pub fn ip_binary() -> &'static str {
    for p in ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"] {
        if std::path::Path::new(p).is_file() {
            return p;
        }
    }
    "ip"
}

fn ip(args: &[&str]) -> HarnessResult<()> {
    let out = Command::new(ip_binary())
        .args(args)
        .output()
        .map_err(|e| HarnessError::io(format!("running ip {}", args.join(" ")), e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(HarnessError::Config(format!(
            "ip {} failed ({}): {} (network namespaces need root and iproute2)",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// A switch and hosts on it.
#[derive(Debug)]
pub struct Network {
    prefix: String,
    switch: String,
    hosts: Vec<(String, NetHost)>,
}

impl Network {
    /// Makes a switch, one namespace per name in `names` (addresses `10.213.N.11` and
    /// up, in order) and a link from this process's namespace (`10.213.N.1`).
    ///
    /// # Errors
    /// [`HarnessError::Config`] when `ip` fails (not root, no iproute2).
    pub fn create(names: &[&str]) -> HarnessResult<Network> {
        let tag = std::process::id() % 10_000;
        let prefix = format!("tn{tag}");
        // One /24 per run, from the process id, so parallel runs do not share a subnet.
        let subnet = format!("10.213.{}", 20 + tag % 200);
        let switch = format!("{prefix}-sw");
        let mut network = Network {
            prefix: prefix.clone(),
            switch: switch.clone(),
            hosts: Vec::new(),
        };
        ip(&["netns", "add", &switch])?;
        ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &switch, "link", "set", "br0", "up"])?;
        // This process's own link to the switch.
        let (here, there) = (format!("{prefix}r"), format!("{prefix}rs"));
        ip(&["link", "add", &here, "type", "veth", "peer", "name", &there])?;
        ip(&["link", "set", &there, "netns", &switch])?;
        ip(&["-n", &switch, "link", "set", &there, "master", "br0", "up"])?;
        ip(&["addr", "add", &format!("{subnet}.1/24"), "dev", &here])?;
        ip(&["link", "set", &here, "up"])?;
        for (i, name) in names.iter().enumerate() {
            let ns = format!("{prefix}-{name}");
            let (inside, port) = (format!("{prefix}h{i}"), format!("{prefix}s{i}"));
            let addr = format!("{subnet}.{}", 11 + i);
            ip(&["netns", "add", &ns])?;
            network.hosts.push((
                (*name).to_owned(),
                NetHost {
                    netns: Some(ns.clone()),
                    ip: addr.clone(),
                },
            ));
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&[
                "link", "add", &inside, "type", "veth", "peer", "name", &port,
            ])?;
            ip(&["link", "set", &inside, "netns", &ns])?;
            ip(&["link", "set", &port, "netns", &switch])?;
            ip(&["-n", &switch, "link", "set", &port, "master", "br0", "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                &inside,
            ])?;
            ip(&["-n", &ns, "link", "set", &inside, "up"])?;
        }
        Ok(network)
    }

    /// The host named `name`.
    ///
    /// # Panics
    /// When there is no such host (a test's own mistake).
    pub fn host(&self, name: &str) -> &NetHost {
        self.hosts
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, h)| h)
            .unwrap_or_else(|| panic!("no host {name} in this network"))
    }

    fn switch_port(&self, name: &str) -> HarnessResult<String> {
        let i = self
            .hosts
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| HarnessError::Config(format!("no host {name}")))?;
        Ok(format!("{}s{i}", self.prefix))
    }

    /// Cuts `name` off the switch: nothing reaches it and it reaches nothing (its
    /// processes keep running).
    ///
    /// # Errors
    /// When `ip` fails.
    pub fn cut(&self, name: &str) -> HarnessResult<()> {
        self.set_link(name, "down")
    }

    /// Puts `name` back on the switch.
    ///
    /// # Errors
    /// When `ip` fails.
    pub fn heal(&self, name: &str) -> HarnessResult<()> {
        self.set_link(name, "up")
    }

    /// Sets `name`'s port on the switch `up` or `down`.
    fn set_link(&self, name: &str, state: &str) -> HarnessResult<()> {
        let port = self.switch_port(name)?;
        ip(&["-n", &self.switch, "link", "set", &port, state])
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth ends in it, and their peers.
        for (_, h) in &self.hosts {
            if let Some(ns) = &h.netns {
                let _ = ip(&["netns", "del", ns]);
            }
        }
        let _ = ip(&["netns", "del", &self.switch]);
        let _ = ip(&["link", "del", &format!("{}r", self.prefix)]);
    }
}
