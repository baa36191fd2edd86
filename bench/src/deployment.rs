//! Real Talon processes for the gateway benches: the origin stub, a
//! coordinator, workers and gateways, started from the release binaries on
//! loopback (every listener on port 0, found through the processes' ready
//! files), waited on by condition (ready file, membership), and killed when
//! their handle drops — on success, on error, on a panic, and when the bench
//! is interrupted (the binaries drop everything on Ctrl-C and SIGTERM).
//!
//! Every process runs with a cleared environment (so the caller's
//! `AWS_ACCESS_KEY_ID` and friends cannot leak into a gateway) plus
//! `TALON_LOG=warn`, and logs to a file in the bench's temporary folder;
//! when one dies early, the error carries the end of its log.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use talon_core::Backend;

use http::{Method, StatusCode};
use talon_origin_stub::faults::FaultConfig;
use talon_origin_stub::generated::{GeneratedObject, GeneratedSet};
use talon_origin_stub::{DEFAULT_AZURE_ACCOUNT, EMULATOR_AZURE_KEY};
use talon_protocols::azure::shared_key::AccountKey;
use talon_protocols::s3::sigv4::S3Credentials;

use crate::harness_error::{HarnessError, HarnessResult};
use crate::http_load::{Auth, control_request};
use crate::netns::{NetHost, ip_binary};
use crate::tls::BenchTls;

/// The per-prefix origin request limit the benches' gateways and workers run with: on
/// (its cost is measured with the rest) but far above any rate a bench reaches, so
/// that a proxy bench measures the data path, not the default 3,500 a second.
pub const UNTHROTTLED: u32 = 1_000_000;

/// The access key clients sign with (the gateways require it).
pub const CLIENT_ACCESS_KEY: &str = "TALONBENCHCLIENT";
/// Its secret.
pub const CLIENT_SECRET_KEY: &str = "talon-bench-client-secret";
/// The access key gateways and workers sign origin requests with. The
/// stub runs without credentials, so it accepts any signature unchecked.
pub const ORIGIN_ACCESS_KEY: &str = "TALONBENCHORIGIN";
/// Its secret.
pub const ORIGIN_SECRET_KEY: &str = "talon-bench-origin-secret";

/// How long a process may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a condition is re-checked while waiting.
const POLL: Duration = Duration::from_millis(20);

/// Where the Talon binaries are.
#[derive(Debug, Clone)]
pub struct Binaries {
    dir: PathBuf,
}

impl Binaries {
    /// The folder `dir`, or by default the folder of the running executable
    /// (`target/release/` when the bench itself was built there).
    ///
    /// # Errors
    /// [`HarnessError::Io`] when the running executable cannot be found.
    pub fn locate(dir: Option<&Path>) -> HarnessResult<Binaries> {
        let dir = match dir {
            Some(d) => d.to_owned(),
            None => std::env::current_exe()
                .map_err(|e| HarnessError::io("finding the running executable", e))?
                .parent()
                .map(Path::to_owned)
                .unwrap_or_default(),
        };
        Ok(Binaries { dir })
    }

    /// The path of binary `name`.
    ///
    /// # Errors
    /// [`HarnessError::MissingBinary`] when it is not there.
    pub fn path(&self, name: &str) -> HarnessResult<PathBuf> {
        let path = self.dir.join(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(HarnessError::MissingBinary {
                name: name.to_owned(),
                path,
            })
        }
    }

    /// Checks that every binary in `names` is there.
    ///
    /// # Errors
    /// [`HarnessError::MissingBinary`] for the first that is not.
    pub fn require(&self, names: &[&str]) -> HarnessResult<()> {
        names.iter().try_for_each(|n| self.path(n).map(|_| ()))
    }
}

/// The cluster secret of every deployment this process starts (coordinator, workers
/// and gateways read it from `TALON_CLUSTER_SECRET`): random per bench run.
pub fn cluster_secret() -> &'static str {
    static SECRET: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SECRET.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let part = || {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u8(1);
            h.finish()
        };
        format!("bench-{:016x}{:016x}", part(), part())
    })
}

/// A child process that is killed (SIGKILL) and reaped when dropped.
#[derive(Debug)]
pub struct Process {
    name: String,
    child: Child,
    log: PathBuf,
}

/// The `TALON_GATEWAY_*` and `TALON_WORKER_*` variables of this process's environment,
/// which every part the harness starts inherits (its environment is otherwise cleared).
pub fn passed_through_env() -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("TALON_GATEWAY_") || k.starts_with("TALON_WORKER_"))
        .collect();
    vars.sort();
    vars
}

impl Process {
    /// Starts `program` with `args`, an empty environment plus `env`, and
    /// stdout and stderr appended to `log`.
    ///
    /// # Errors
    /// [`HarnessError::Io`] when the log cannot be created,
    /// [`HarnessError::Spawn`] when the program cannot be started.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[OsString],
        env: &[(&str, &str)],
        log: PathBuf,
    ) -> HarnessResult<Process> {
        Process::spawn_on(&NetHost::loopback(), name, program, args, env, log)
    }

    /// [`Process::spawn`] on `host`: in its network namespace, through
    /// `ip netns exec` (which execs the program: the child is the program itself).
    ///
    /// # Errors
    /// As [`Process::spawn`].
    pub fn spawn_on(
        host: &NetHost,
        name: &str,
        program: &Path,
        args: &[OsString],
        env: &[(&str, &str)],
        log: PathBuf,
    ) -> HarnessResult<Process> {
        let out = File::create(&log)
            .map_err(|e| HarnessError::io(format!("creating {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| HarnessError::io(format!("opening {}", log.display()), e))?;
        let mut cmd = match &host.netns {
            None => Command::new(program),
            Some(ns) => {
                let mut c = Command::new(ip_binary());
                c.args(["netns", "exec", ns.as_str()]).arg(program);
                c
            }
        };
        cmd.args(args)
            .env_clear()
            .env("TALON_LOG", "warn")
            .env("TALON_CLUSTER_SECRET", cluster_secret())
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        // The parts' own tuning, set in the bench's environment (for an A/B of a
        // setting: `TALON_GATEWAY_PIECE_SIZE=2MiB just gateway-bench ...`).
        for (k, v) in passed_through_env() {
            cmd.env(k, v);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().map_err(|source| HarnessError::Spawn {
            name: name.to_owned(),
            source,
        })?;
        Ok(Process {
            name: name.to_owned(),
            child,
            log,
        })
    }

    /// The process's name in the harness.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Errors when the process has exited.
    ///
    /// # Errors
    /// [`HarnessError::Exited`] with its status and the end of its log.
    pub fn ensure_running(&mut self, when: &str) -> HarnessResult<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(HarnessError::Exited {
                name: self.name.clone(),
                status: status.to_string(),
                when: when.to_owned(),
                log: self.log_tail(30),
            }),
            Err(e) => Err(HarnessError::io(format!("checking on {}", self.name), e)),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Waits until `check` returns `Some`, re-checking every few milliseconds,
/// while every process in `watch` stays alive.
///
/// # Errors
/// [`HarnessError::Exited`] when one of them exits, [`HarnessError::Timeout`]
/// after `timeout`.
pub async fn wait_until<T, F, Fut>(
    what: &str,
    timeout: Duration,
    watch: &mut [&mut Process],
    mut check: F,
) -> HarnessResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        for p in watch.iter_mut() {
            p.ensure_running(&format!("while the bench waited for {what}"))?;
        }
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(HarnessError::Timeout {
                what: what.to_owned(),
                after: timeout,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `path`, with whatever a previous instance left there removed: a part restarted in
/// the same folder (a worker after a kill) must not be taken as ready on its
/// predecessor's file, with the predecessor's address.
///
/// # Errors
/// [`HarnessError::Io`] when an old file cannot be removed.
fn fresh_ready_file(path: PathBuf) -> HarnessResult<PathBuf> {
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(path),
        Err(e) => Err(HarnessError::io(format!("removing {}", path.display()), e)),
    }
}

/// Waits for `process`'s ready file and returns its JSON.
async fn ready_file(process: &mut Process, path: &Path) -> HarnessResult<serde_json::Value> {
    let what = format!("{}'s ready file {}", process.name(), path.display());
    wait_until(&what, READY_TIMEOUT, &mut [process], || async {
        let text = std::fs::read(path).ok()?;
        serde_json::from_slice::<serde_json::Value>(&text).ok()
    })
    .await
}

fn field(json: &serde_json::Value, name: &str, of: &str) -> HarnessResult<String> {
    json.get(name)
        .and_then(|v| v.as_str())
        .map(str::to_owned)
        .ok_or_else(|| HarnessError::Control(format!("{of}'s ready file has no '{name}': {json}")))
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// The origin stub: S3 and Azure over generated objects, with no
/// credentials configured (it accepts any signature, or none, on both
/// protocols, so every client of it pays the same).
#[derive(Debug)]
pub struct Stub {
    /// The process.
    pub process: Process,
    /// `http://addr` of the S3 API.
    pub s3_url: String,
    /// `http://addr/ACCOUNT` of the Azure API.
    pub azure_url: String,
    /// `http://addr` of the admin API.
    pub admin_url: String,
}

impl Stub {
    /// Starts a stub serving `objects`, with its data folder in `dir`.
    ///
    /// # Errors
    /// As [`Process::spawn`]; a stub that dies or never becomes ready.
    pub async fn start(
        binaries: &Binaries,
        dir: &Path,
        objects: &[GeneratedObject],
    ) -> HarnessResult<Stub> {
        Stub::start_on(binaries, dir, objects, &NetHost::loopback()).await
    }

    /// [`Stub::start`] on `host`.
    ///
    /// # Errors
    /// As [`Stub::start`].
    pub async fn start_on(
        binaries: &Binaries,
        dir: &Path,
        objects: &[GeneratedObject],
        host: &NetHost,
    ) -> HarnessResult<Stub> {
        Stub::launch(binaries, dir, objects, &[], host).await
    }

    /// A stub serving the generated datasets `sets` (`--generate-set`), on loopback.
    ///
    /// # Errors
    /// As [`Stub::start`].
    pub async fn start_with_sets(
        binaries: &Binaries,
        dir: &Path,
        sets: &[GeneratedSet],
    ) -> HarnessResult<Stub> {
        Stub::launch(binaries, dir, &[], sets, &NetHost::loopback()).await
    }

    /// A stub serving `objects` and the generated datasets `sets`, on loopback.
    ///
    /// # Errors
    /// As [`Stub::start`].
    pub async fn start_with_objects_and_sets(
        binaries: &Binaries,
        dir: &Path,
        objects: &[GeneratedObject],
        sets: &[GeneratedSet],
    ) -> HarnessResult<Stub> {
        Stub::launch(binaries, dir, objects, sets, &NetHost::loopback()).await
    }

    async fn launch(
        binaries: &Binaries,
        dir: &Path,
        objects: &[GeneratedObject],
        sets: &[GeneratedSet],
        host: &NetHost,
    ) -> HarnessResult<Stub> {
        let data = dir.join("origin-data");
        std::fs::create_dir_all(&data)
            .map_err(|e| HarnessError::io(format!("creating {}", data.display()), e))?;
        let ready = fresh_ready_file(dir.join("stub.ready.json"))?;
        let listen = host.any_port();
        let mut args = os(&[
            "--s3-listen",
            &listen,
            "--azure-listen",
            &listen,
            "--admin-listen",
            &listen,
        ]);
        args.push("--data-dir".into());
        args.push(data.into());
        for o in objects {
            args.push("--generate".into());
            args.push(format!("{}/{}={},{}", o.bucket, o.key, o.size, o.seed).into());
        }
        for set in sets {
            args.push("--generate-set".into());
            args.push(
                format!(
                    "{}/{}={},{}-{},{}",
                    set.bucket, set.prefix, set.count, set.min_size, set.max_size, set.seed
                )
                .into(),
            );
        }
        args.push("--ready-file".into());
        args.push(ready.clone().into());
        let mut process = Process::spawn_on(
            host,
            "talon-origin-stub",
            &binaries.path("talon-origin-stub")?,
            &args,
            // Fault injection behind a token: on a host of a network namespace its
            // admin listener is not on loopback, where the stub refuses it open.
            &[("TALON_STUB_ADMIN_TOKEN", cluster_secret())],
            dir.join("stub.log"),
        )?;
        let json = ready_file(&mut process, &ready).await?;
        let s3_url = field(&json, "s3", "talon-origin-stub")?;
        let azure = field(&json, "azure", "talon-origin-stub")?;
        let account = field(&json, "azure_account", "talon-origin-stub")?;
        let admin_url = field(&json, "admin", "talon-origin-stub")?;
        Ok(Stub {
            process,
            s3_url,
            azure_url: format!("{azure}/{account}"),
            admin_url,
        })
    }

    /// Replaces the stub's fault settings (latency, bandwidth cap).
    ///
    /// # Errors
    /// [`HarnessError::Control`] when the stub refuses them.
    pub async fn set_faults(&self, faults: &FaultConfig) -> HarnessResult<()> {
        let body = serde_json::to_string(faults)
            .map_err(|e| HarnessError::Control(format!("encoding the faults: {e}")))?;
        let url = format!("{}/admin/faults", self.admin_url);
        let (status, text) = control_request(Method::PUT, &url, Some(body)).await?;
        if status != StatusCode::OK {
            return Err(HarnessError::Control(format!(
                "PUT {url} answered {status}: {text}"
            )));
        }
        Ok(())
    }
}

/// The cluster geometry a coordinator publishes (its `--block-size` and `--page-size`):
/// the gateways' and workers' own flags must name the same.
#[derive(Debug, Clone, Copy)]
pub struct Geometry {
    /// Bytes per block.
    pub block_size: u64,
    /// Bytes per page.
    pub page_size: u64,
}

/// A coordinator.
#[derive(Debug)]
pub struct Coordinator {
    /// The process.
    pub process: Process,
    /// Its base URL.
    pub url: String,
}

impl Coordinator {
    /// Starts a coordinator (heartbeats every 200 ms, expiry after 2 s).
    ///
    /// # Errors
    /// As [`Process::spawn`]; one that dies or never becomes ready.
    pub async fn start(
        binaries: &Binaries,
        dir: &Path,
        name: &str,
        geometry: Geometry,
    ) -> HarnessResult<Coordinator> {
        Coordinator::start_on(binaries, dir, name, geometry, &NetHost::loopback()).await
    }

    /// [`Coordinator::start`] on `host`.
    ///
    /// # Errors
    /// As [`Coordinator::start`].
    pub async fn start_on(
        binaries: &Binaries,
        dir: &Path,
        name: &str,
        geometry: Geometry,
        host: &NetHost,
    ) -> HarnessResult<Coordinator> {
        let ready = fresh_ready_file(dir.join(format!("{name}.ready.json")))?;
        let listen = host.any_port();
        let mut args = os(&[
            "--listen",
            &listen,
            "--heartbeat-interval-ms",
            "200",
            "--expiry-ms",
            "2000",
            "--block-size",
            &geometry.block_size.to_string(),
            "--page-size",
            &geometry.page_size.to_string(),
        ]);
        args.push("--ready-file".into());
        args.push(ready.clone().into());
        let mut process = Process::spawn_on(
            host,
            name,
            &binaries.path("talon-coordinator")?,
            &args,
            &[],
            dir.join(format!("{name}.log")),
        )?;
        let json = ready_file(&mut process, &ready).await?;
        let url = field(&json, "url", name)?;
        Ok(Coordinator { process, url })
    }

    /// Waits until the member `id` is live with the data-plane address
    /// `addr`.
    ///
    /// # Errors
    /// [`HarnessError::Timeout`], or [`HarnessError::Exited`] when the
    /// coordinator or `worker` dies meanwhile.
    pub async fn wait_for_member(
        &mut self,
        worker: &mut Process,
        id: &str,
        addr: &str,
    ) -> HarnessResult<()> {
        let url = format!("{}/v1/members", self.url);
        let what = format!("worker {id} to be live at {addr} in {}", self.url);
        wait_until(
            &what,
            READY_TIMEOUT,
            &mut [&mut self.process, worker],
            || async {
                let (status, text) = control_request(Method::GET, &url, None).await.ok()?;
                if status != StatusCode::OK {
                    return None;
                }
                let json: serde_json::Value = serde_json::from_str(&text).ok()?;
                json.get("members")?
                    .as_array()?
                    .iter()
                    .any(|m| {
                        m.get("id").and_then(|v| v.as_str()) == Some(id)
                            && m.get("addr").and_then(|v| v.as_str()) == Some(addr)
                            && m.get("state").and_then(|v| v.as_str()) == Some("live")
                    })
                    .then_some(())
            },
        )
        .await
    }
}

/// A worker.
#[derive(Debug)]
pub struct Worker {
    /// The process.
    pub process: Process,
    /// Its id in the membership.
    pub id: String,
    /// Where its data plane listens.
    pub addr: String,
    /// `http://addr` of its admin endpoints (`/metrics`).
    pub admin_url: String,
    /// The address it advertises (its own, or a relay's).
    pub advertised: String,
}

/// What a worker is started with.
#[derive(Debug, Clone)]
pub struct WorkerSpec<'a> {
    /// Its id (also names its log and cache folder).
    pub id: &'a str,
    /// The coordinator's URL.
    pub coordinator: &'a str,
    /// The address to advertise instead of its own (a delay line's).
    pub advertise: Option<String>,
    /// Byte budget of its cache.
    pub capacity: u64,
    /// Its page size.
    pub page_size: u64,
    /// Where it runs (`None`: this machine's loopback).
    pub host: Option<&'a NetHost>,
    /// Its `--origin-requests-per-prefix` (requests a second to the origin per prefix);
    /// `None`: [`UNTHROTTLED`], so that a bench measures the data path.
    pub origin_request_limit: Option<u32>,
    /// Its `--max-blocks`; `None`: the worker's default.
    pub max_blocks: Option<usize>,
}

impl Worker {
    /// Starts a worker reading both of `stub`'s protocols and waits until
    /// the coordinator lists it as live.
    ///
    /// # Errors
    /// As [`Process::spawn`]; one that dies, or never joins.
    pub async fn start(
        binaries: &Binaries,
        dir: &Path,
        stub: &Stub,
        coordinator: &mut Coordinator,
        spec: WorkerSpec<'_>,
    ) -> HarnessResult<Worker> {
        let ready = fresh_ready_file(dir.join(format!("{}.ready.json", spec.id)))?;
        let cache = dir.join(format!("{}-cache", spec.id));
        std::fs::create_dir_all(&cache)
            .map_err(|e| HarnessError::io(format!("creating {}", cache.display()), e))?;
        let loopback = NetHost::loopback();
        let host = spec.host.unwrap_or(&loopback);
        let listen = host.any_port();
        let mut args = os(&[
            "--listen",
            &listen,
            "--admin-listen",
            &listen,
            "--heartbeat-interval-ms",
            "200",
            "--azure-account",
            DEFAULT_AZURE_ACCOUNT,
            "--azure-key",
            EMULATOR_AZURE_KEY,
            "--s3-access-key",
            ORIGIN_ACCESS_KEY,
            "--s3-secret-key",
            ORIGIN_SECRET_KEY,
        ]);
        for (flag, value) in [
            ("--id", spec.id.to_owned()),
            ("--coordinator", spec.coordinator.to_owned()),
            ("--s3-endpoint", stub.s3_url.clone()),
            ("--azure-endpoint", stub.azure_url.clone()),
            ("--capacity", spec.capacity.to_string()),
            ("--page-size", spec.page_size.to_string()),
            (
                "--origin-requests-per-prefix",
                spec.origin_request_limit.unwrap_or(UNTHROTTLED).to_string(),
            ),
        ] {
            args.push(flag.into());
            args.push(value.into());
        }
        if let Some(n) = spec.max_blocks {
            args.push("--max-blocks".into());
            args.push(n.to_string().into());
        }
        if let Some(a) = &spec.advertise {
            args.push("--advertise-addr".into());
            args.push(a.into());
        }
        args.push("--cache-dir".into());
        args.push(cache.into());
        args.push("--ready-file".into());
        args.push(ready.clone().into());
        let mut process = Process::spawn_on(
            host,
            spec.id,
            &binaries.path("talon-worker")?,
            &args,
            &[],
            dir.join(format!("{}.log", spec.id)),
        )?;
        let json = ready_file(&mut process, &ready).await?;
        let addr = field(&json, "addr", spec.id)?;
        let admin_url = field(&json, "admin", spec.id)?;
        let advertised = spec.advertise.clone().unwrap_or_else(|| addr.clone());
        coordinator
            .wait_for_member(&mut process, spec.id, &advertised)
            .await?;
        Ok(Worker {
            process,
            id: spec.id.to_owned(),
            addr,
            admin_url,
            advertised,
        })
    }
}

/// A gateway's read route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// Through the cache.
    Cache,
    /// Straight to the origin.
    Origin,
}

impl Route {
    /// `cache` or `origin`, as the gateway's flags spell it.
    pub fn name(self) -> &'static str {
        match self {
            Route::Cache => "cache",
            Route::Origin => "origin",
        }
    }
}

/// What a gateway is started with.
#[derive(Debug, Clone)]
pub struct GatewaySpec<'a> {
    /// Its name in the harness (and its log's).
    pub name: &'a str,
    /// The one front it serves (the other is off).
    pub front: Backend,
    /// That front's route.
    pub route: Route,
    /// The coordinator of its cache cluster (the cache route needs one).
    pub coordinator: Option<&'a str>,
    /// The cluster's block size.
    pub block_size: u64,
    /// Whether it reads workers on this host through their local socket (the
    /// co-located fast path); `false` reads every worker over TCP, as a gateway on
    /// another host would.
    pub local_reads: bool,
    /// Its `--max-staleness-ms` (declared staleness); `None` keeps the gateway's default.
    pub max_staleness_ms: Option<u64>,
    /// Its `--hedge-budget` (hedged reads; 0 turns them off); `None` keeps the
    /// gateway's default.
    pub hedge_budget: Option<f64>,
    /// Where it runs (`None`: this machine's loopback).
    pub host: Option<&'a NetHost>,
    /// Its `--origin-requests-per-prefix`; `None`: [`UNTHROTTLED`].
    pub origin_request_limit: Option<u32>,
    /// Whether it also serves unsigned reads (its identities file's `"anonymous":
    /// "read"`), as well as the signed requests every gateway here takes: the proxy
    /// bench's unsigned arms, which measure what verifying a signature costs.
    pub unsigned_reads: bool,
    /// HTTPS on its front with this certificate (`--tls-cert`, `--tls-key`); its URL
    /// is then `https://`.
    pub tls: Option<&'a BenchTls>,
    /// Its `--read-ahead-objects`; `None` keeps the gateway's default.
    pub read_ahead_objects: Option<usize>,
}

/// A gateway with one front.
#[derive(Debug)]
pub struct Gateway {
    /// The process.
    pub process: Process,
    /// The front's base URL: `http://addr` (S3) or `http://addr/ACCOUNT`
    /// (Azure).
    pub url: String,
    /// `http://addr` of its admin endpoints.
    pub admin_url: String,
}

impl Gateway {
    /// Starts a gateway in front of `stub` (both origins, signed with the
    /// origin identity) that requires clients to sign: SigV4 with
    /// [`CLIENT_ACCESS_KEY`], or Azure Shared Key with the emulator's account
    /// key (and takes unsigned reads too when `spec.unsigned_reads`). Returns once it has written its ready file and answers
    /// `/readyz`.
    ///
    /// # Errors
    /// As [`Process::spawn`]; one that dies or never becomes ready.
    pub async fn start(
        binaries: &Binaries,
        dir: &Path,
        stub: &Stub,
        spec: GatewaySpec<'_>,
    ) -> HarnessResult<Gateway> {
        let identities = dir.join(format!("{}.identities.json", spec.name));
        let doc = serde_json::json!({
            "s3": [{"access_key": CLIENT_ACCESS_KEY, "secret_key": CLIENT_SECRET_KEY}],
            "azure": {"account": DEFAULT_AZURE_ACCOUNT, "key": EMULATOR_AZURE_KEY},
            "anonymous": if spec.unsigned_reads { "read" } else { "none" },
        });
        std::fs::write(&identities, doc.to_string())
            .map_err(|e| HarnessError::io(format!("writing {}", identities.display()), e))?;
        let ready = fresh_ready_file(dir.join(format!("{}.ready.json", spec.name)))?;
        let loopback = NetHost::loopback();
        let host = spec.host.unwrap_or(&loopback);
        let listen = host.any_port();
        let (s3, azure) = match spec.front {
            Backend::S3 => (listen.as_str(), "off"),
            Backend::Azure => ("off", listen.as_str()),
        };
        let mut args = os(&[
            "--s3-listen",
            s3,
            "--azure-listen",
            azure,
            "--admin-listen",
            &listen,
            "--s3-route",
            spec.route.name(),
            "--azure-route",
            spec.route.name(),
            "--origin-s3-access-key",
            ORIGIN_ACCESS_KEY,
            "--origin-s3-secret-key",
            ORIGIN_SECRET_KEY,
            "--origin-azure-account",
            DEFAULT_AZURE_ACCOUNT,
            "--origin-azure-key",
            EMULATOR_AZURE_KEY,
        ]);
        for (flag, value) in [
            ("--origin-s3-endpoint", stub.s3_url.clone()),
            ("--origin-azure-endpoint", stub.azure_url.clone()),
            ("--block-size", spec.block_size.to_string()),
            ("--local-reads", spec.local_reads.to_string()),
            (
                "--origin-requests-per-prefix",
                spec.origin_request_limit.unwrap_or(UNTHROTTLED).to_string(),
            ),
        ] {
            args.push(flag.into());
            args.push(value.into());
        }
        if let Some(c) = spec.coordinator {
            args.push("--coordinator".into());
            args.push(c.into());
        }
        if let Some(ms) = spec.max_staleness_ms {
            args.push("--max-staleness-ms".into());
            args.push(ms.to_string().into());
        }
        if let Some(objects) = spec.read_ahead_objects {
            args.push("--read-ahead-objects".into());
            args.push(objects.to_string().into());
        }
        if let Some(fraction) = spec.hedge_budget {
            args.push("--hedge-budget".into());
            args.push(fraction.to_string().into());
        }
        if let Some(tls) = spec.tls {
            args.push("--tls-cert".into());
            args.push(tls.cert.clone().into());
            args.push("--tls-key".into());
            args.push(tls.key.clone().into());
        }
        args.push("--identities".into());
        args.push(identities.into());
        args.push("--ready-file".into());
        args.push(ready.clone().into());
        let mut process = Process::spawn_on(
            host,
            spec.name,
            &binaries.path("talon-gateway")?,
            &args,
            &[],
            dir.join(format!("{}.log", spec.name)),
        )?;
        let json = ready_file(&mut process, &ready).await?;
        let url = match spec.front {
            Backend::S3 => field(&json, "s3", spec.name)?,
            Backend::Azure => field(&json, "azure", spec.name)?,
        };
        let admin_url = field(&json, "admin", spec.name)?;
        let readyz = format!("{admin_url}/readyz");
        let what = format!("{} to answer {readyz}", spec.name);
        wait_until(&what, READY_TIMEOUT, &mut [&mut process], || async {
            let (status, _) = control_request(Method::GET, &readyz, None).await.ok()?;
            (status == StatusCode::OK).then_some(())
        })
        .await?;
        Ok(Gateway {
            process,
            url,
            admin_url,
        })
    }
}

/// How clients of a gateway's front sign: SigV4 with [`CLIENT_ACCESS_KEY`]
/// for S3, Shared Key with the emulator account key for Azure.
///
/// # Errors
/// [`HarnessError::Config`] if the built-in key does not decode.
pub fn client_auth(protocol: Backend) -> HarnessResult<Auth> {
    Ok(match protocol {
        Backend::S3 => Auth::SigV4 {
            credentials: S3Credentials {
                access_key: CLIENT_ACCESS_KEY.into(),
                secret_key: CLIENT_SECRET_KEY.into(),
                session_token: None,
            },
            region: "us-east-1".into(),
        },
        Backend::Azure => Auth::SharedKey {
            account: DEFAULT_AZURE_ACCOUNT.into(),
            key: AccountKey::from_base64(EMULATOR_AZURE_KEY)
                .map_err(|e| HarnessError::Config(format!("the emulator key: {}", e.message())))?,
        },
    })
}

/// A free loopback port, found by binding port 0 (for servers that cannot
/// report the port they bound, such as nginx). Another process could take
/// it before the server binds; the server then fails to start and says so.
///
/// # Errors
/// [`HarnessError::Io`] when nothing can be bound.
pub fn free_port() -> HarnessResult<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| HarnessError::io("finding a free port", e))
}

/// What every gateway bench sets up before it starts a process: the Talon binaries
/// (all four checked), the host's description, the JSON Lines sink and a scratch
/// folder (kept on request, for the processes' logs).
#[derive(Debug)]
pub struct BenchSetup {
    /// Where the release binaries are.
    pub binaries: Binaries,
    /// Cores, CPU, kernel, commit.
    pub host: crate::host::HostInfo,
    /// The results file (`bench/results/NAME.jsonl` unless `out` says otherwise).
    pub lines: crate::results::JsonLines,
    /// The scratch folder; removed on drop unless kept.
    pub tmp: tempfile::TempDir,
}

impl BenchSetup {
    /// Sets up bench `name` (`gateway-bench`, `gateway-proxy-bench`).
    ///
    /// # Errors
    /// A missing binary, an unwritable results file, no scratch folder.
    pub fn new(
        name: &str,
        bin_dir: Option<&Path>,
        out: Option<PathBuf>,
        json: bool,
        keep_dir: bool,
    ) -> HarnessResult<BenchSetup> {
        let binaries = Binaries::locate(bin_dir)?;
        binaries.require(&[
            "talon-origin-stub",
            "talon-coordinator",
            "talon-worker",
            "talon-gateway",
        ])?;
        let root = crate::results::repo_root();
        let host = crate::host::HostInfo::detect(&root);
        let out = out.unwrap_or_else(|| root.join(format!("bench/results/{name}.jsonl")));
        let lines = crate::results::JsonLines::create(&out, json)?;
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!("talon-{name}-"))
            .tempdir()
            .map_err(|e| HarnessError::io("creating a temporary folder", e))?;
        if keep_dir {
            tmp.disable_cleanup(true);
            eprintln!("[{name}] keeping {}", tmp.path().display());
        }
        Ok(BenchSetup {
            binaries,
            host,
            lines,
            tmp,
        })
    }
}

/// Runs a bench binary's body until it finishes or the process is interrupted
/// (either way the processes it started are dropped, hence killed), as the
/// process's exit code: success only for `Ok(true)`; an error is printed as
/// `NAME: error` with its causes.
pub async fn run_bench<E: std::fmt::Display>(
    name: &str,
    bench: impl std::future::Future<Output = Result<bool, E>>,
) -> std::process::ExitCode {
    let outcome = tokio::select! {
        r = bench => r.map_err(|e| format!("{e:#}")),
        () = interrupted() => Err("interrupted; every process the bench started has been stopped".to_owned()),
    };
    match outcome {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM; a bench `select!`s its run
/// against it, so an interrupted run drops (and kills) its processes.
pub async fn interrupted() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
