//! A small etcd v3 client over etcd's JSON gateway (`/v3/kv/*`, `/v3/lease/*`,
//! `/v3/watch`), enough for the coordinator's shared membership: ranges, puts bound to
//! leases, compare-and-put transactions, lease grant / keep-alive / revoke, and a watch
//! of a prefix.
//!
//! Why not the `etcd-client` crate: it generates its gRPC code at build time with
//! `protoc`, which a fresh machine does not have, and the README's one-command build
//! must keep working there. The JSON gateway is part of etcd's stable v3 API (served on
//! the client port by every etcd 3.4+), and reqwest is already in the tree.
//!
//! Every call tries the endpoints in turn, starting with the one that answered last, so
//! a dead etcd member costs one connect timeout, not an error. Keys and values are
//! bytes, base64 on the wire; int64 fields come back as decimal strings.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use talon_coordinator_client::error::CoordinatorError;

/// How long one request to one endpoint may take (a watch is exempt once it has begun).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// A key's value and its revisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: Vec<u8>,
    /// The value (empty in a delete event).
    pub value: Vec<u8>,
    /// The revision of its last change.
    pub mod_revision: i64,
    /// The lease it is bound to (0: none).
    pub lease: i64,
}

/// One change a watch saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// The key was created or changed.
    Put(KeyValue),
    /// The key was deleted (or its lease expired).
    Delete(Vec<u8>),
}

/// What a compare-and-put compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The key does not exist.
    Absent,
    /// The key was last changed at this revision.
    ModRevision(i64),
}

/// A client of one etcd cluster.
#[derive(Debug)]
pub struct Etcd {
    endpoints: Vec<String>,
    /// The endpoint that answered last.
    preferred: AtomicUsize,
    http: reqwest::Client,
}

fn unavailable(what: impl std::fmt::Display) -> CoordinatorError {
    CoordinatorError::StateStore(what.to_string())
}

fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn bytes(v: &Value) -> Vec<u8> {
    v.as_str()
        .and_then(|s| B64.decode(s).ok())
        .unwrap_or_default()
}

fn key_value(kv: &Value) -> KeyValue {
    KeyValue {
        key: bytes(&kv["key"]),
        value: bytes(&kv["value"]),
        mod_revision: int(&kv["mod_revision"]),
        lease: int(&kv["lease"]),
    }
}

/// The end of the range of every key that starts with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// TLS to etcd: the CA the members' certificates are checked against, and this
/// coordinator's own certificate for a cluster that requires one
/// (`--client-cert-auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    /// PEM bundle of the CAs to trust (and only those).
    pub ca: PathBuf,
    /// PEM certificate chain and PEM private key of this client, if etcd asks for one.
    pub client: Option<(PathBuf, PathBuf)>,
}

fn invalid(what: impl std::fmt::Display) -> CoordinatorError {
    CoordinatorError::InvalidConfig(what.to_string())
}

fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>, CoordinatorError> {
    std::fs::read(path).map_err(|e| invalid(format!("etcd {what} {}: {e}", path.display())))
}

/// Each endpoint as a URL: `host:port` gets the scheme `tls` implies, and a scheme that
/// disagrees with it is refused (no request to etcd in clear text once TLS is asked for,
/// none over TLS without a CA to check it).
fn endpoint_urls(endpoints: &[String], tls: bool) -> Result<Vec<String>, CoordinatorError> {
    if endpoints.is_empty() {
        return Err(invalid("etcd needs at least one endpoint"));
    }
    endpoints
        .iter()
        .map(|e| {
            let e = e.trim().trim_end_matches('/');
            match (e.split_once("://").map(|(scheme, _)| scheme), tls) {
                (None, false) => Ok(format!("http://{e}")),
                (None, true) => Ok(format!("https://{e}")),
                (Some("http"), false) | (Some("https"), true) => Ok(e.to_owned()),
                (Some("https"), false) => Err(invalid(format!(
                    "etcd endpoint {e}: TLS needs the CA to check etcd's certificate against (--etcd-ca)"
                ))),
                (Some("http"), true) => Err(invalid(format!(
                    "etcd endpoint {e}: --etcd-ca asks for TLS; give host:port or https://"
                ))),
                (Some(other), _) => Err(invalid(format!(
                    "etcd endpoint {e}: scheme {other} is not http or https"
                ))),
            }
        })
        .collect()
}

impl Etcd {
    /// A client of the cluster at `endpoints` (`host:port`, or a URL), over TLS when
    /// `tls` is given.
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidConfig`] for no endpoint, a scheme that disagrees with
    /// `tls`, or a CA, certificate or key that cannot be read or used.
    pub fn new(endpoints: &[String], tls: Option<&EtcdTls>) -> Result<Etcd, CoordinatorError> {
        let endpoints = endpoint_urls(endpoints, tls.is_some())?;
        let mut http = reqwest::Client::builder().connect_timeout(Duration::from_millis(500));
        if let Some(tls) = tls {
            let cas = reqwest::Certificate::from_pem_bundle(&read_pem(&tls.ca, "CA")?)
                .map_err(|e| invalid(format!("etcd CA {}: {e}", tls.ca.display())))?;
            if cas.is_empty() {
                return Err(invalid(format!(
                    "etcd CA {} holds no certificate",
                    tls.ca.display()
                )));
            }
            http = http.tls_built_in_root_certs(false).https_only(true);
            for ca in cas {
                http = http.add_root_certificate(ca);
            }
            if let Some((cert, key)) = &tls.client {
                let mut pem = read_pem(cert, "client certificate")?;
                pem.push(b'\n');
                pem.extend(read_pem(key, "client key")?);
                let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                    invalid(format!("etcd client certificate {}: {e}", cert.display()))
                })?;
                http = http.identity(identity);
            }
        }
        let http = http
            .build()
            .map_err(|e| invalid(format!("etcd client: {e}")))?;
        Ok(Etcd {
            endpoints,
            preferred: AtomicUsize::new(0),
            http,
        })
    }

    /// The endpoints' indexes in the order to try them: the one that answered last first.
    fn endpoint_order(&self) -> impl Iterator<Item = usize> + '_ {
        let first = self.preferred.load(Ordering::Relaxed);
        (0..self.endpoints.len()).map(move |i| (first + i) % self.endpoints.len())
    }

    /// POSTs `body` to `path` on the first endpoint that answers.
    async fn call(&self, path: &str, body: &Value) -> Result<Value, CoordinatorError> {
        let mut last = String::new();
        for at in self.endpoint_order() {
            let url = format!("{}{path}", self.endpoints[at]);
            let answer = self
                .http
                .post(&url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string())
                .timeout(REQUEST_TIMEOUT)
                .send()
                .await;
            match answer {
                Ok(r) if r.status().is_success() => {
                    let raw = r
                        .bytes()
                        .await
                        .map_err(|e| unavailable(format!("etcd {url}: {e}")))?;
                    let v: Value = serde_json::from_slice(&raw)
                        .map_err(|e| unavailable(format!("etcd {url}: {e}")))?;
                    self.preferred.store(at, Ordering::Relaxed);
                    return Ok(v);
                }
                Ok(r) => {
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    // A refusal of the request itself would be the same on every member.
                    if status.is_client_error() {
                        return Err(unavailable(format!("etcd {url}: {status} {text}")));
                    }
                    last = format!("{url}: {status} {text}");
                }
                Err(e) => last = format!("{url}: {e}"),
            }
        }
        Err(unavailable(format!(
            "no etcd endpoint answered (last: {last})"
        )))
    }

    /// The key's value, if it exists.
    ///
    /// # Errors
    /// [`CoordinatorError::StateStore`] when no endpoint answers.
    pub async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, CoordinatorError> {
        let v = self
            .call("/v3/kv/range", &json!({ "key": B64.encode(key) }))
            .await?;
        Ok(v["kvs"]
            .as_array()
            .and_then(|kvs| kvs.first())
            .map(key_value))
    }

    /// Every key under `prefix`, and the revision they were read at.
    ///
    /// # Errors
    /// [`CoordinatorError::StateStore`] when no endpoint answers.
    pub async fn list(&self, prefix: &[u8]) -> Result<(Vec<KeyValue>, i64), CoordinatorError> {
        let v = self
            .call(
                "/v3/kv/range",
                &json!({ "key": B64.encode(prefix), "range_end": B64.encode(prefix_end(prefix)) }),
            )
            .await?;
        let kvs = v["kvs"]
            .as_array()
            .map(|kvs| kvs.iter().map(key_value).collect())
            .unwrap_or_default();
        Ok((kvs, int(&v["header"]["revision"])))
    }

    /// Puts `value` at `key` bound to `lease` if `expect` holds; whether it did. Lease 0
    /// keeps the key's lease (none for a key created).
    ///
    /// # Errors
    /// [`CoordinatorError::StateStore`] when no endpoint answers.
    pub async fn put_if(
        &self,
        key: &[u8],
        value: &[u8],
        lease: i64,
        expect: Expect,
    ) -> Result<bool, CoordinatorError> {
        let key64 = B64.encode(key);
        let compare = match expect {
            Expect::Absent => {
                json!({ "key": key64, "target": "CREATE", "result": "EQUAL", "create_revision": "0" })
            }
            Expect::ModRevision(r) => {
                json!({ "key": key64, "target": "MOD", "result": "EQUAL", "mod_revision": r.to_string() })
            }
        };
        let put = if lease == 0 && expect == Expect::Absent {
            json!({ "key": key64, "value": B64.encode(value) })
        } else if lease == 0 {
            json!({ "key": key64, "value": B64.encode(value), "ignore_lease": true })
        } else {
            json!({ "key": key64, "value": B64.encode(value), "lease": lease.to_string() })
        };
        let v = self
            .call(
                "/v3/kv/txn",
                &json!({ "compare": [compare], "success": [{ "request_put": put }] }),
            )
            .await?;
        Ok(v["succeeded"].as_bool().unwrap_or(false))
    }

    /// Puts `value` at `key`, with no lease and no condition.
    ///
    /// # Errors
    /// [`CoordinatorError::StateStore`] when no endpoint answers.
    pub async fn put(&self, key: &[u8], value: &[u8]) -> Result<(), CoordinatorError> {
        self.call(
            "/v3/kv/put",
            &json!({ "key": B64.encode(key), "value": B64.encode(value) }),
        )
        .await
        .map(|_| ())
    }

    /// Deletes every key under `prefix`.
    ///
    /// # Errors
    /// [`CoordinatorError::StateStore`] when no endpoint answers.
    pub async fn delete_prefix(&self, prefix: &[u8]) -> Result<(), CoordinatorError> {
        self.call(
            "/v3/kv/deleterange",
            &json!({ "key": B64.encode(prefix), "range_end": B64.encode(prefix_end(prefix)) }),
        )
        .await
        .map(|_| ())
    }

    /// A lease of `ttl` (whole seconds, at least 1); its id.
    ///
    /// # Errors
    /// [`CoordinatorError::StateStore`] when no endpoint answers or etcd grants none.
    pub async fn grant(&self, ttl: Duration) -> Result<i64, CoordinatorError> {
        let secs = ttl.as_secs_f64().ceil().max(1.0) as i64;
        let v = self
            .call("/v3/lease/grant", &json!({ "TTL": secs.to_string() }))
            .await?;
        match int(&v["ID"]) {
            0 => Err(unavailable(format!("etcd granted no lease: {v}"))),
            id => Ok(id),
        }
    }

    /// Renews the lease; false when it has expired (or never existed).
    ///
    /// # Errors
    /// [`CoordinatorError::StateStore`] when no endpoint answers.
    pub async fn keep_alive(&self, lease: i64) -> Result<bool, CoordinatorError> {
        let v = self
            .call("/v3/lease/keepalive", &json!({ "ID": lease.to_string() }))
            .await?;
        Ok(int(&v["result"]["TTL"]) > 0)
    }

    /// Revokes the lease, deleting the keys bound to it.
    ///
    /// # Errors
    /// [`CoordinatorError::StateStore`] when no endpoint answers.
    pub async fn revoke(&self, lease: i64) -> Result<(), CoordinatorError> {
        self.call("/v3/lease/revoke", &json!({ "ID": lease.to_string() }))
            .await
            .map(|_| ())
    }

    /// Watches every key under `prefix` from `from_revision` on, calling `on_event` for
    /// each change in order, until the stream ends or fails (then it returns, and the
    /// caller lists and watches again).
    ///
    /// # Errors
    /// [`CoordinatorError::StateStore`] when no endpoint accepts the watch, or the
    /// stream breaks.
    pub async fn watch(
        &self,
        prefix: &[u8],
        from_revision: i64,
        mut on_event: impl FnMut(WatchEvent),
    ) -> Result<(), CoordinatorError> {
        let body = json!({ "create_request": {
            "key": B64.encode(prefix),
            "range_end": B64.encode(prefix_end(prefix)),
            "start_revision": from_revision.to_string(),
        }});
        let mut last = String::new();
        for at in self.endpoint_order() {
            let url = format!("{}/v3/watch", self.endpoints[at]);
            let request = self
                .http
                .post(&url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string());
            let response = match request.send().await {
                Ok(r) if r.status().is_success() => r,
                Ok(r) => {
                    last = format!("{url}: {}", r.status());
                    continue;
                }
                Err(e) => {
                    last = format!("{url}: {e}");
                    continue;
                }
            };
            let mut stream = response.bytes_stream();
            let mut buf: Vec<u8> = Vec::new();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| unavailable(format!("etcd watch {url}: {e}")))?;
                buf.extend_from_slice(&chunk);
                while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=nl).collect();
                    let Ok(v) = serde_json::from_slice::<Value>(&line) else {
                        continue;
                    };
                    if v["result"]["canceled"].as_bool() == Some(true) {
                        return Err(unavailable(format!("etcd canceled the watch: {v}")));
                    }
                    for e in v["result"]["events"].as_array().into_iter().flatten() {
                        let kv = key_value(&e["kv"]);
                        on_event(if e["type"].as_str() == Some("DELETE") {
                            WatchEvent::Delete(kv.key)
                        } else {
                            WatchEvent::Put(kv)
                        });
                    }
                }
            }
            return Err(unavailable(format!("etcd watch {url} ended")));
        }
        Err(unavailable(format!(
            "no etcd endpoint accepted the watch (last: {last})"
        )))
    }
}

/// How long [`Etcd::follow`] waits before reading again after the watch broke.
const RESYNC_BACKOFF: Duration = Duration::from_millis(500);

impl Etcd {
    /// Mirrors every key under `prefix` until `stop`: hands `on_list` the whole prefix,
    /// then `on_event` each change from the watch, in order; after a break, lists
    /// again (so `on_list` must replace, not merge).
    pub async fn follow(
        &self,
        prefix: &[u8],
        mut stop: tokio::sync::watch::Receiver<bool>,
        mut on_list: impl FnMut(Vec<KeyValue>),
        mut on_event: impl FnMut(WatchEvent),
    ) {
        loop {
            let synced = async {
                let (kvs, revision) = self.list(prefix).await?;
                on_list(kvs);
                self.watch(prefix, revision + 1, &mut on_event).await
            };
            tokio::select! {
                result = synced => {
                    if let Err(e) = result {
                        tracing::warn!(
                            prefix = %String::from_utf8_lossy(prefix),
                            error = %e,
                            "mirror of etcd broke; reading again"
                        );
                    }
                }
                _ = stop.wait_for(|s| *s) => return,
            }
            tokio::select! {
                () = tokio::time::sleep(RESYNC_BACKOFF) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_range_ends_past_every_key_under_it() {
        assert_eq!(prefix_end(b"/talon/"), b"/talon0".to_vec());
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b".to_vec());
        assert_eq!(prefix_end(&[0xff]), vec![0]);
    }

    #[test]
    fn gateway_json_decodes_strings_numbers_and_base64() {
        let kv = key_value(&json!({
            "key": B64.encode("/k"), "value": B64.encode("v"),
            "mod_revision": "12", "lease": 7
        }));
        assert_eq!(
            kv,
            KeyValue {
                key: b"/k".to_vec(),
                value: b"v".to_vec(),
                mod_revision: 12,
                lease: 7,
            }
        );
        // A delete event carries no value and no lease.
        let gone = key_value(&json!({ "key": B64.encode("/k"), "mod_revision": "13" }));
        assert_eq!((gone.value.len(), gone.lease), (0, 0));
    }

    #[test]
    fn endpoints_take_the_scheme_tls_implies_and_refuse_the_other() {
        let plain = endpoint_urls(&["127.0.0.1:2379".into(), "http://h:1/".into()], false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plain, ["http://127.0.0.1:2379", "http://h:1"]);
        let tls = endpoint_urls(&["h:1".into(), "https://h:2".into()], true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tls, ["https://h:1", "https://h:2"]);
        for (endpoint, tls) in [
            ("https://h:1", false),
            ("http://h:1", true),
            ("ftp://h:1", true),
        ] {
            assert!(
                endpoint_urls(&[endpoint.into()], tls).is_err(),
                "{endpoint} {tls}"
            );
        }
        assert!(endpoint_urls(&[], false).is_err());
    }

    #[test]
    fn a_ca_that_cannot_be_read_or_holds_nothing_is_refused() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap_or_else(|e| panic!("{e}"));
        for ca in [dir.path().join("missing.pem"), empty] {
            let tls = EtcdTls { ca, client: None };
            let refused = Etcd::new(&["h:1".into()], Some(&tls))
                .err()
                .unwrap_or_else(|| panic!("accepted"));
            assert!(
                matches!(refused, CoordinatorError::InvalidConfig(_)),
                "{refused}"
            );
        }
    }
}
