//! Serving any [`ObjectBackend`] with the protocols' two servers on loopback, for a test
//! that has a backend but no server of its own (the in-memory backend): path-style S3
//! on one port, the emulator-style Azure Blob account on another, both with the keys of
//! [`super::suite::Keys::local`].

use std::net::SocketAddr;
use std::sync::Arc;

use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::suite::{Endpoint, Keys};
use crate::azure::auth::AzureIdentity;
use crate::azure::request::AzureAddressing;
use crate::azure::server::AzureServer;
use crate::s3::auth::S3Identities;
use crate::s3::request::S3Addressing;
use crate::s3::server::S3Server;
use crate::server::{ObjectBackend, ServerLimits};

/// What both fronts answer with, owned for the life of the listeners.
struct Fronts {
    s3_addressing: S3Addressing,
    s3_identities: S3Identities,
    azure_addressing: AzureAddressing,
    azure_identity: AzureIdentity,
    azure_endpoint: String,
    region: String,
}

/// A backend served on loopback; the listeners stop when this is dropped.
#[derive(Debug)]
pub struct Served {
    /// Where the suite finds both fronts, and the keys they take.
    pub endpoint: Endpoint,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Serves `backend` with the S3 server and the Azure Blob server, each on a free
/// loopback port.
///
/// # Errors
/// A listener that cannot be bound.
pub async fn serve<B>(backend: Arc<B>) -> std::io::Result<Served>
where
    B: ObjectBackend + 'static,
{
    let keys = Keys::local();
    let s3_listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let azure_listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let s3_url = format!("http://{}", s3_listener.local_addr()?);
    let azure_url = format!("http://{}/{}", azure_listener.local_addr()?, keys.account);
    let fronts = Arc::new(Fronts {
        s3_addressing: S3Addressing::PathStyle,
        s3_identities: S3Identities {
            regions: vec![keys.region.clone()],
            ..S3Identities::default()
        }
        .with_unrestricted_key(&keys.s3.access_key, &keys.s3.secret_key),
        azure_addressing: AzureAddressing::PathStyle,
        azure_identity: AzureIdentity::unrestricted(
            keys.account.clone(),
            Some(keys.account_key.clone()),
            crate::access::AnonymousAccess::Refused,
        ),
        azure_endpoint: azure_url.clone(),
        region: keys.region.clone(),
    });
    let s3 = {
        let (fronts, backend) = (fronts.clone(), backend.clone());
        tokio::spawn(accept(s3_listener, move |req, _peer| {
            let (fronts, backend) = (fronts.clone(), backend.clone());
            async move {
                let server = S3Server {
                    addressing: &fronts.s3_addressing,
                    identities: &fronts.s3_identities,
                    acls: None,
                    region: &fronts.region,
                    owner_id: "talon-conformance",
                    server_name: "talon-conformance",
                    limits: ServerLimits::default(),
                    log_requests: false,
                };
                crate::s3::server::handle(&server, &*backend, req)
                    .await
                    .response
            }
        }))
    };
    let azure = tokio::spawn(accept(azure_listener, move |req, peer: SocketAddr| {
        let (fronts, backend) = (fronts.clone(), backend.clone());
        async move {
            let server = AzureServer {
                addressing: &fronts.azure_addressing,
                identity: &fronts.azure_identity,
                acls: None,
                https: false,
                service_endpoint: Some(&fronts.azure_endpoint),
                server_name: "talon-conformance",
                limits: ServerLimits::default(),
                log_requests: false,
            };
            crate::azure::server::handle(&server, &*backend, req, Some(peer.ip()))
                .await
                .response
        }
    }));
    Ok(Served {
        endpoint: Endpoint {
            s3_url,
            azure_url,
            keys,
        },
        tasks: vec![s3, azure],
    })
}

/// Accepts connections on `listener` and answers each request with `answer`.
async fn accept<F, Fut>(listener: TcpListener, answer: F)
where
    F: Fn(Request<Incoming>, SocketAddr) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = http::Response<crate::server::AnswerBody>> + Send,
{
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        let answer = answer.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let answer = answer.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(req, peer).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
