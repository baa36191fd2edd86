//! A second peer arm of the proxy bench: Varnish Cache in front of the origin stub's
//! S3 endpoint. Varnish caches whole objects: the first ranged request of an object
//! fetches all of it from the origin (requests for it meanwhile wait on that fetch),
//! and every range after that is cut from the cached copy in memory
//! (`http_range_support`, on by default). Storage is `malloc` and sized to hold the
//! bench's object.
//!
//! Its VCL, working folder (`-n`) and log live in one folder; it runs in the
//! foreground (`-F`) without its management interface (`-T none`) and without the
//! privilege-separation jail (`-j none`), so it needs no system user or folders. It
//! compiles the VCL with the system's C compiler (Debian's varnish package depends on
//! one).
//! Dropping [`Varnish`] kills the manager and its cache process.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::deployment::{Process, free_port, wait_until};
use crate::harness_error::{HarnessError, HarnessResult};
use crate::nginx::find_installed;

/// Where varnishd is looked for when it is not on `PATH`.
const KNOWN_PATHS: &[&str] = &["/usr/sbin/varnishd", "/usr/local/sbin/varnishd"];

/// The varnishd binary, if one is installed.
pub fn find_varnishd() -> Option<PathBuf> {
    find_installed("varnishd", KNOWN_PATHS)
}

/// The VCL that makes Varnish a cache of `upstream` (`host:port`): every GET is looked
/// up (credentials and cookies dropped, as the bench's peer requests are anonymous) and
/// every answer is kept for an hour.
pub fn vcl(upstream: &str) -> HarnessResult<String> {
    let (host, port) = upstream.rsplit_once(':').ok_or_else(|| {
        HarnessError::io(
            format!("upstream {upstream:?} is not host:port"),
            std::io::Error::from(std::io::ErrorKind::InvalidInput),
        )
    })?;
    Ok(format!(
        r#"vcl 4.1;
# Written by talon-gateway-proxy-bench; removed with its folder.
backend origin {{
    .host = "{host}";
    .port = "{port}";
}}
sub vcl_recv {{
    unset req.http.Authorization;
    unset req.http.Cookie;
    return (hash);
}}
sub vcl_backend_response {{
    set beresp.ttl = 1h;
    set beresp.grace = 0s;
}}
"#
    ))
}

/// A running Varnish.
#[derive(Debug)]
pub struct Varnish {
    /// The manager process (the cache process is its child).
    pub process: Process,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Varnish {
    /// Writes the VCL into `dir` and starts `binary` caching `upstream` (`host:port`)
    /// in `storage_bytes` of memory, then waits until it accepts connections.
    ///
    /// # Errors
    /// [`HarnessError::Io`] for the folder or the VCL, as [`Process::spawn`], or a
    /// varnishd that exits or never listens.
    pub async fn start(
        binary: &Path,
        dir: &Path,
        upstream: &str,
        storage_bytes: u64,
    ) -> HarnessResult<Varnish> {
        std::fs::create_dir_all(dir)
            .map_err(|e| HarnessError::io(format!("creating {}", dir.display()), e))?;
        let vcl_path = dir.join("talon.vcl");
        std::fs::write(&vcl_path, vcl(upstream)?)
            .map_err(|e| HarnessError::io(format!("writing {}", vcl_path.display()), e))?;
        let addr = format!("127.0.0.1:{}", free_port()?);
        let args: Vec<OsString> = vec![
            "-F".into(),
            "-j".into(),
            "none".into(),
            "-T".into(),
            "none".into(),
            "-a".into(),
            addr.clone().into(),
            "-f".into(),
            vcl_path.into(),
            "-s".into(),
            format!("malloc,{}m", storage_bytes.div_ceil(1 << 20)).into(),
            "-n".into(),
            dir.join("work").into(),
        ];
        // varnishd compiles the VCL with the system's C compiler, which needs PATH.
        let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into());
        let mut process = Process::spawn(
            "varnishd",
            binary,
            &args,
            &[("PATH", &path)],
            dir.join("varnish.log"),
        )?;
        wait_until(
            &format!("varnishd to listen on {addr}"),
            Duration::from_secs(20),
            &mut [&mut process],
            || async { tokio::net::TcpStream::connect(&addr).await.ok().map(|_| ()) },
        )
        .await?;
        Ok(Varnish {
            process,
            url: format!("http://{addr}"),
        })
    }
}

impl Drop for Varnish {
    fn drop(&mut self) {
        // The cache process would outlive a killed manager, so it goes first.
        talon_loadgen::procfs::kill_children(self.process.pid());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vcl_caches_everything_from_the_upstream() {
        let text = vcl("127.0.0.1:9000").unwrap_or_else(|e| panic!("{e}"));
        for needle in [
            "vcl 4.1;",
            ".host = \"127.0.0.1\";",
            ".port = \"9000\";",
            "return (hash);",
            "set beresp.ttl = 1h;",
        ] {
            assert!(text.contains(needle), "missing {needle}:\n{text}");
        }
        assert!(vcl("no-port").is_err());
    }
}
