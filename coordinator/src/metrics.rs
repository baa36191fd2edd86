//! `/metrics`: the membership rendered in the Prometheus text format
//! (version 0.0.4) with `prometheus-client`.
//!
//! Every value is read from one [`MembershipSnapshot`] at scrape time, so
//! the numbers of one scrape are consistent with each other and with the
//! admin API. The series:
//!
//! | name | type | meaning |
//! |---|---|---|
//! | `talon_coordinator_workers{state}` | gauge | members by state (`live`, `draining`) |
//! | `talon_coordinator_epoch_info{epoch}` | info | the current epoch, 16 hex digits |
//! | `talon_coordinator_epoch_changes_total` | counter | times the epoch changed |
//! | `talon_coordinator_registrations_total` | counter | accepted registrations |
//! | `talon_coordinator_registrations_rejected_total` | counter | invalid registrations |
//! | `talon_coordinator_heartbeats_total` | counter | accepted heartbeats |
//! | `talon_coordinator_heartbeats_unknown_total` | counter | heartbeats from unknown workers |
//! | `talon_coordinator_drains_total` | counter | members that started draining |
//! | `talon_coordinator_expirations_total` | counter | members dropped for silence |
//! | `talon_coordinator_capacity_bytes` | gauge | total capacity reported |
//! | `talon_coordinator_cached_bytes` | gauge | total bytes cached reported |
//! | `talon_coordinator_cache_hits`, `_cache_misses` | gauge | total hits, misses reported |
//! | `talon_coordinator_warm_jobs{state}` | gauge | warm jobs kept, by state (`running`, `done`, `cancelled`) |
//! | `talon_coordinator_warm_bytes`, `_warm_bytes_done` | gauge | bytes of the running warm jobs, and of those filled |

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::membership::{Membership, MembershipSnapshot};
use crate::warm::WarmJobs;
use talon_coordinator_client::api::MemberState;

pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Renders the membership's metrics on demand.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
}

impl Metrics {
    /// Metrics over `membership` and the warm jobs.
    pub fn new(membership: Arc<Membership>, warm: Arc<WarmJobs>) -> Self {
        let mut registry = Registry::with_prefix("talon_coordinator");
        registry.register_collector(Box::new(MembershipCollector { membership }));
        registry.register_collector(Box::new(WarmCollector { warm }));
        Self { registry }
    }

    /// The Prometheus text exposition (serve it with [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail, and our collector never errors.
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
        {
            tracing::error!(error = %e, "cannot render metrics");
        }
        out
    }
}

#[derive(Debug)]
struct MembershipCollector {
    membership: Arc<Membership>,
}

fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    metric.encode_counter::<NoLabelSet, u64, u64>(&value, None)
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let mut metric: MetricEncoder<'_> =
        encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    metric.encode_gauge(&value)
}

fn encode_snapshot(
    snap: &MembershipSnapshot,
    mut encoder: DescriptorEncoder<'_>,
) -> Result<(), std::fmt::Error> {
    {
        let mut workers = encoder.encode_descriptor(
            "workers",
            "Members by state: live (in placement) or draining.",
            None,
            MetricType::Gauge,
        )?;
        for state in [MemberState::Live, MemberState::Draining] {
            let labels = [("state", state.as_str())];
            workers
                .encode_family(&labels)?
                .encode_gauge(&(snap.count(state) as u64))?;
        }
    }
    {
        let epoch = snap.epoch.to_string();
        let mut info = encoder.encode_descriptor(
            "epoch",
            "The membership epoch (fingerprint of the placement set).",
            None,
            MetricType::Info,
        )?;
        info.encode_info(&[("epoch", epoch.as_str())])?;
    }
    let c = &snap.counters;
    let counters = [
        (
            "epoch_changes",
            "Times the membership epoch changed.",
            c.epoch_changes,
        ),
        (
            "registrations",
            "Accepted worker registrations.",
            c.registrations,
        ),
        (
            "registrations_rejected",
            "Registrations rejected as invalid.",
            c.rejected_registrations,
        ),
        ("heartbeats", "Accepted heartbeats.", c.heartbeats),
        (
            "heartbeats_unknown",
            "Heartbeats from unknown workers, answered 404 so they register again.",
            c.unknown_heartbeats,
        ),
        ("drains", "Members that started draining.", c.drains),
        (
            "expirations",
            "Members dropped for missing heartbeats.",
            c.expirations,
        ),
    ];
    for (name, help, value) in counters {
        counter(&mut encoder, name, help, value)?;
    }
    let cluster = snap.cluster();
    let gauges = [
        (
            "capacity_bytes",
            "Total cache capacity reported by members.",
            cluster.capacity_bytes,
        ),
        (
            "cached_bytes",
            "Total bytes cached reported by members.",
            cluster.bytes_cached,
        ),
        (
            "cache_hits",
            "Total cache hits reported by members.",
            cluster.hits,
        ),
        (
            "cache_misses",
            "Total cache misses reported by members.",
            cluster.misses,
        ),
    ];
    for (name, help, value) in gauges {
        gauge(&mut encoder, name, help, value)?;
    }
    Ok(())
}

/// The warm jobs' progress, read at scrape time.
#[derive(Debug)]
struct WarmCollector {
    warm: Arc<WarmJobs>,
}

impl Collector for WarmCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use talon_coordinator_client::api::WarmState;
        let jobs = self.warm.list();
        {
            let mut family = encoder.encode_descriptor(
                "warm_jobs",
                "Warm jobs kept, by state: running, done or cancelled.",
                None,
                MetricType::Gauge,
            )?;
            for (state, name) in [
                (WarmState::Running, "running"),
                (WarmState::Done, "done"),
                (WarmState::Cancelled, "cancelled"),
            ] {
                let n = jobs.iter().filter(|j| j.state == state).count() as u64;
                family.encode_family(&[("state", name)])?.encode_gauge(&n)?;
            }
        }
        let running = jobs.iter().filter(|j| j.state == WarmState::Running);
        let (bytes, done) = running.fold((0u64, 0u64), |(b, d), j| (b + j.bytes, d + j.bytes_done));
        for (name, help, value) in [
            ("warm_bytes", "Bytes of the running warm jobs.", bytes),
            (
                "warm_bytes_done",
                "Bytes of the running warm jobs filled so far.",
                done,
            ),
        ] {
            encoder
                .encode_descriptor(name, help, None, MetricType::Gauge)?
                .encode_gauge(&value)?;
        }
        Ok(())
    }
}

impl Collector for MembershipCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        encode_snapshot(&self.membership.snapshot(Instant::now()), encoder)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;
    use talon_coordinator_client::api::{HeartbeatRequest, RegisterRequest};

    #[test]
    fn renders_every_series() {
        let membership = Arc::new(Membership::new(Duration::from_secs(5)));
        let now = Instant::now();
        for id in ["a", "b"] {
            let req = RegisterRequest {
                id: id.into(),
                addr: "h:1".into(),
                weight: 1,
                zone: String::new(),
                capacity_bytes: 100,
                instance: String::new(),
                data_plane: String::new(),
                local: Default::default(),
                placement_version: talon_coordinator_client::placement::PLACEMENT_VERSION,
                page_size: 0,
            };
            membership.register(&req, now).unwrap();
        }
        let hb = HeartbeatRequest {
            hits: 5,
            ..HeartbeatRequest::default()
        };
        membership.heartbeat("a", &hb, now).unwrap();
        membership.drain("b", None).unwrap();
        let warm = Arc::new(WarmJobs::default());
        let placement = membership.snapshot(now).placement();
        let objects = vec![crate::warm::ListedObject {
            id: talon_core::ObjectId::s3("b", "k").unwrap(),
            size: 3000,
            version: talon_core::ObjectVersion::from_etag("\"v\"").unwrap(),
        }];
        let plan = crate::warm::WarmPlan::new("s3://b/", objects, 1024, 0).unwrap();
        warm.start(&plan, &placement).unwrap();
        let text = Metrics::new(membership.clone(), warm).render();
        let epoch = membership.epoch().to_string();
        for line in [
            "talon_coordinator_workers{state=\"live\"} 1",
            "talon_coordinator_workers{state=\"draining\"} 1",
            &format!("talon_coordinator_epoch_info{{epoch=\"{epoch}\"}} 1"),
            "talon_coordinator_registrations_total 2",
            "talon_coordinator_heartbeats_total 1",
            "talon_coordinator_drains_total 1",
            "talon_coordinator_expirations_total 0",
            "talon_coordinator_epoch_changes_total 3",
            "talon_coordinator_capacity_bytes 200",
            "talon_coordinator_cache_hits 5",
            "talon_coordinator_warm_jobs{state=\"running\"} 1",
            "talon_coordinator_warm_jobs{state=\"done\"} 0",
            "talon_coordinator_warm_bytes 3000",
            "talon_coordinator_warm_bytes_done 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing in\n{text}"
            );
        }
        assert!(text.contains("# TYPE talon_coordinator_workers gauge"));
    }
}
