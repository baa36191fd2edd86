//! `talon-bench`: the comparison harness behind Talon's published figures — the
//! gateway benches (`talon-gateway-bench`, `talon-gateway-proxy-bench`,
//! `talon-dataset-bench`), the fault-injection run (`talon-chaos`) and the
//! network-namespace hosts the cluster tests use. It owns temporary deployments
//! of Talon and its peers (nginx, Varnish), the HTTP load against them with every
//! byte verified, result records and their summaries.
//!
//! It does not own the load generator the shipped binary carries (`talon loadgen`):
//! that is `talon-loadgen`, which this crate uses for `/proc` readings and figures.
//! Nothing here is linked into `talon`.

pub mod dataset_load;
pub mod delay_line;
pub mod deployment;
pub mod harness_error;
pub mod host;
pub mod http_load;
pub mod netns;
pub mod nginx;
pub mod results;
pub mod rounds;
pub mod summary;
pub mod tls;
pub mod varnish;
pub mod verify;
pub mod watch;
