//! The peer arm of the proxy bench: nginx as a caching reverse proxy in
//! front of the origin stub's S3 endpoint, with the slice module cutting
//! every object into cached slices the size of the bench's ranges
//! (`slice`, `proxy_cache`, the slice range in the cache key), the way
//! nginx is deployed as a range cache for object stores.
//!
//! Its configuration, cache, temporary files, pid file and logs all live in
//! one folder; it runs in the foreground (`daemon off`) with a master
//! process and one worker per core. Dropping [`Nginx`] kills the master and
//! its workers.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::deployment::{Process, free_port, wait_until};
use crate::harness_error::{HarnessError, HarnessResult};
use crate::tls::BenchTls;

/// Where nginx is looked for when it is not on `PATH`.
const KNOWN_PATHS: &[&str] = &["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"];

/// The nginx binary, if one is installed.
pub fn find_nginx() -> Option<PathBuf> {
    find_installed("nginx", KNOWN_PATHS)
}

/// An installed program: `name` on `PATH`, else the first of `known` that exists
/// (`/usr/sbin` is not on every user's `PATH`).
pub fn find_installed(name: &str, known: &[&str]) -> Option<PathBuf> {
    let from_path: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join(name)).collect())
        .unwrap_or_default();
    from_path
        .into_iter()
        .chain(known.iter().map(PathBuf::from))
        .find(|p| p.is_file())
}

/// What the configuration says.
#[derive(Debug, Clone)]
pub struct NginxConfig {
    /// The folder for everything nginx writes.
    pub dir: PathBuf,
    /// Loopback port it listens on.
    pub port: u16,
    /// `host:port` of the origin's S3 endpoint.
    pub upstream: String,
    /// Slice size in bytes (the bench's range size).
    pub slice: u64,
    /// Worker processes.
    pub workers: usize,
    /// Add `user root;` (when started as root, so the workers can write
    /// the cache folder the master created).
    pub as_root: bool,
    /// `sendfile on` (cached slices go from the cache file to the socket in the
    /// kernel) or `off` (nginx reads each into its buffers and writes it: one copy
    /// through user space, what a relaying gateway such as Talon's must do).
    pub sendfile: bool,
    /// HTTPS with this certificate and key (PEM files), or plain HTTP. OpenSSL does
    /// the encryption in nginx's workers; `sendfile` then has no kernel path to use
    /// (no kTLS is configured), so each cached byte is read into user space.
    pub tls: Option<(PathBuf, PathBuf)>,
}

impl NginxConfig {
    /// The `nginx.conf` text.
    pub fn render(&self) -> String {
        let d = self.dir.display();
        let user = if self.as_root { "user root;\n" } else { "" };
        let (ssl, tls) = match &self.tls {
            None => ("", String::new()),
            Some((cert, key)) => (
                " ssl",
                format!(
                    "\n        ssl_certificate {};\n        ssl_certificate_key {};\n        \
                     ssl_protocols TLSv1.2 TLSv1.3;\n        ssl_session_cache shared:tls_sessions:1m;",
                    cert.display(),
                    key.display()
                ),
            ),
        };
        format!(
            r#"# Written by talon-gateway-proxy-bench; removed with its folder.
{user}daemon off;
master_process on;
worker_processes {workers};
pid {d}/nginx.pid;
error_log {d}/error.log warn;

events {{
    worker_connections 4096;
}}

http {{
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy_temp;
    fastcgi_temp_path {d}/fastcgi_temp;
    uwsgi_temp_path {d}/uwsgi_temp;
    scgi_temp_path {d}/scgi_temp;
    sendfile {sendfile};
    # tcp_nopush (TCP_CORK with sendfile) held every 64 KiB answer ~40 ms on this
    # loopback (1,470 rps at 64 connections, against 15,601 without it).
    tcp_nopush off;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 300s;

    proxy_cache_path {d}/cache levels=1:2 keys_zone=talon:32m max_size=4g inactive=1h use_temp_path=off;

    upstream origin {{
        server {upstream};
        keepalive 64;
    }}

    server {{
        listen 127.0.0.1:{port}{ssl};{tls}

        location / {{
            slice {slice};
            proxy_cache talon;
            proxy_cache_key $uri$is_args$args$slice_range;
            proxy_set_header Range $slice_range;
            proxy_cache_valid 200 206 1h;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://origin;
        }}
    }}
}}
"#,
            workers = self.workers.max(1),
            upstream = self.upstream,
            port = self.port,
            slice = self.slice,
            sendfile = if self.sendfile { "on" } else { "off" },
        )
    }
}

/// A running nginx.
#[derive(Debug)]
pub struct Nginx {
    /// The master process.
    pub process: Process,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

/// Whether this process runs as root (uid 0), from `/proc/self/status`.
pub fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|rest| rest.split_whitespace().nth(1).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

impl Nginx {
    /// Writes the configuration into `dir` and starts `binary` as a caching
    /// proxy of `upstream` (`host:port`), with `sendfile` on or off, then waits
    /// until it accepts connections.
    ///
    /// # Errors
    /// [`HarnessError::Io`] for the folder or config, as
    /// [`Process::spawn`], or an nginx that exits or never listens.
    pub async fn start(
        binary: &Path,
        dir: &Path,
        upstream: &str,
        slice: u64,
        workers: usize,
        sendfile: bool,
        tls: Option<&BenchTls>,
    ) -> HarnessResult<Nginx> {
        std::fs::create_dir_all(dir.join("cache"))
            .map_err(|e| HarnessError::io(format!("creating {}", dir.display()), e))?;
        let config = NginxConfig {
            dir: dir.to_owned(),
            port: free_port()?,
            upstream: upstream.to_owned(),
            slice,
            workers,
            as_root: running_as_root(),
            sendfile,
            tls: tls.map(|t| (t.cert.clone(), t.key.clone())),
        };
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config.render())
            .map_err(|e| HarnessError::io(format!("writing {}", conf.display()), e))?;
        let args: Vec<OsString> = vec![
            "-p".into(),
            dir.into(),
            "-e".into(),
            dir.join("error.log").into(),
            "-c".into(),
            conf.into(),
        ];
        let mut process = Process::spawn("nginx", binary, &args, &[], dir.join("nginx.log"))?;
        let addr = format!("127.0.0.1:{}", config.port);
        wait_until(
            &format!("nginx to listen on {addr}"),
            Duration::from_secs(10),
            &mut [&mut process],
            || async { tokio::net::TcpStream::connect(&addr).await.ok().map(|_| ()) },
        )
        .await
        .map_err(|e| match e {
            HarnessError::Exited {
                name,
                status,
                when,
                log,
            } => {
                let error_log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                HarnessError::Exited {
                    name,
                    status,
                    when,
                    log: format!("{log}\n{error_log}"),
                }
            }
            other => other,
        })?;
        Ok(Nginx {
            process,
            url: format!("{}://{addr}", if tls.is_some() { "https" } else { "http" }),
        })
    }

    /// The master and its workers.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.process.pid()];
        pids.extend(talon_loadgen::procfs::children_of(self.process.pid()));
        pids
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // The workers outlive a killed master, so they go first.
        talon_loadgen::procfs::kill_children(self.process.pid());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_caches_slices_keyed_by_their_range() {
        let c = NginxConfig {
            dir: PathBuf::from("/tmp/x"),
            port: 8080,
            upstream: "127.0.0.1:9000".into(),
            slice: 1 << 20,
            workers: 2,
            as_root: false,
            sendfile: true,
            tls: None,
        };
        let text = c.render();
        for needle in [
            "daemon off;",
            "worker_processes 2;",
            "pid /tmp/x/nginx.pid;",
            "slice 1048576;",
            "proxy_cache_key $uri$is_args$args$slice_range;",
            "proxy_set_header Range $slice_range;",
            "server 127.0.0.1:9000;",
            "listen 127.0.0.1:8080;",
            "proxy_cache_path /tmp/x/cache",
            "sendfile on;",
        ] {
            assert!(text.contains(needle), "missing {needle}:\n{text}");
        }
        assert!(!text.contains("user root") && !text.contains("ssl"));
        let copying = NginxConfig {
            sendfile: false,
            ..c.clone()
        }
        .render();
        assert!(copying.contains("sendfile off;") && !copying.contains("sendfile on;"));
        let https = NginxConfig {
            tls: Some(("/tmp/x/c.crt".into(), "/tmp/x/c.key".into())),
            ..c.clone()
        }
        .render();
        for needle in [
            "listen 127.0.0.1:8080 ssl;",
            "ssl_certificate /tmp/x/c.crt;",
            "ssl_certificate_key /tmp/x/c.key;",
        ] {
            assert!(https.contains(needle), "missing {needle}:\n{https}");
        }
        assert!(NginxConfig { as_root: true, ..c }.render().starts_with(
            "# Written by talon-gateway-proxy-bench; removed with its folder.\nuser root;"
        ));
    }
}
