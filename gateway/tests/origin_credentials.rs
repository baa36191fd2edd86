//! Origin credentials the way deployments hand them out, expiring mid-run: the gateway
//! takes them from AWS's default chain (IMDSv2, the container endpoint, web identity
//! through moto's STS) or Azure's (workload identity, a service principal, a managed
//! identity, a SAS file) and refreshes them before they expire, so every read and write
//! through it succeeds while the credentials change under it. The IMDSv2 and container runs go
//! to an origin that refuses expired keys as S3 does (`talon_testkit::
//! credential_endpoints::ExpiringOrigin`); a client that keeps its first keys is refused
//! there, which shows the origin enforces what the gateway avoids.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use sha2::{Digest as _, Sha256};
use talon_gateway::config::{Backend, Identities, IdentitiesFile, Limits, Route, S3Front};
use talon_gateway::{GatewayConfig, RunningGateway};
use talon_protocols::access::AnonymousAccess;
use talon_protocols::origin::credentials::{RefreshingCredentials, WebIdentitySource};
use talon_protocols::origin::{OriginClient, OriginConfig, Origins};
use talon_protocols::s3::request::S3Addressing;
use talon_protocols::s3::sigv4::S3Credentials;
use talon_testkit::credential_endpoints::{
    CLIENT_SECRET, CONTAINER_TOKEN, CredentialEndpoints, ExpiringOrigin, FEDERATED_TOKEN,
    IDENTITY_HEADER, Issuer, Protocol,
};
use talon_testkit::independent_origins::{IndependentOrigin, OriginKind};
use talon_testkit::wait_for;

const ACCOUNT: &str = "devstoreaccount1";

/// How long the issued keys live: short enough that a run crosses several expiries.
const LIFETIME: Duration = Duration::from_secs(3);

fn anonymous_origin(endpoint: String) -> OriginClient {
    OriginClient::new(OriginConfig::S3 {
        endpoint,
        region: "us-east-1".into(),
        credentials: None,
        virtual_hosted: false,
    })
    .unwrap()
}

/// A gateway whose S3 front reads and writes `origins`' origin of kind `backend`
/// (route `origin`), open to anonymous clients: the tests are about the origin side.
async fn gateway(origins: Origins, backend: Backend) -> RunningGateway {
    talon_gateway::start(GatewayConfig {
        s3: Some(S3Front {
            listen: "127.0.0.1:0".parse().unwrap(),
            route: Route::Origin,
            backend,
            addressing: S3Addressing::PathStyle,
            region: "us-east-1".into(),
        }),
        azure: None,
        admin_listen: None,
        origins,
        cache: None,
        identities: Identities::from_parts(IdentitiesFile {
            anonymous: AnonymousAccess::ReadWrite,
            ..IdentitiesFile::default()
        })
        .unwrap(),
        freshness: talon_gateway::Freshness::within(Duration::from_millis(100)),
        limits: Limits::default(),
        tls: None,
        acl_file: None,
        cache_status: true,
        access_log: None,
    })
    .await
    .unwrap()
}

fn over_s3(client: OriginClient) -> Origins {
    Origins {
        s3: Some(client),
        azure: None,
    }
}

fn over_azure(client: OriginClient) -> Origins {
    Origins {
        s3: None,
        azure: Some((ACCOUNT.into(), client)),
    }
}

fn body(i: u32) -> Vec<u8> {
    (0..20_000u32)
        .map(|j| (j.wrapping_mul(31) ^ i.wrapping_mul(7)) as u8)
        .collect()
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// Creates `bucket` through the gateway.
async fn make_bucket(gw: &RunningGateway, bucket: &str) {
    let s3 = gw.s3_url().unwrap();
    let made = reqwest::Client::new()
        .put(format!("{s3}/{bucket}"))
        .send()
        .await
        .unwrap();
    assert!(
        made.status().is_success(),
        "create bucket: {}",
        made.status()
    );
}

/// Writes and reads objects in `bucket` through the gateway until `done` says enough
/// keys were used; every request must succeed and read back what was written.
async fn read_and_write_until(
    gw: &RunningGateway,
    bucket: &str,
    mut done: impl FnMut() -> bool,
) -> u32 {
    let http = reqwest::Client::new();
    let s3 = gw.s3_url().unwrap();
    let mut i = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "the keys were not refreshed within 60 s"
        );
        let put = http
            .put(format!("{s3}/{bucket}/obj-{i}"))
            .body(body(i))
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 200, "PUT {i}: {}", put.text().await.unwrap());
        let get = http
            .get(format!("{s3}/{bucket}/obj-{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(get.status(), 200, "GET {i}");
        assert_eq!(sha(&get.bytes().await.unwrap()), sha(&body(i)), "GET {i}");
        i += 1;
    }
    i
}

async fn expiring_run(env: BTreeMap<&'static str, String>, issuer: Issuer, origin: ExpiringOrigin) {
    let origins = over_s3(anonymous_origin(origin.url()))
        .with_default_s3_credentials(&|name| env.get(name).cloned())
        .await
        .unwrap();
    let gw = gateway(origins, Backend::S3).await;
    // Four sets of keys: the first, then three refreshes, each before the last expired.
    make_bucket(&gw, "creds").await;
    let rounds = read_and_write_until(&gw, "creds", || issuer.issued() >= 4).await;
    let counts = origin.counts();
    assert_eq!(counts.expired, 0, "{counts:?}");
    assert_eq!(counts.refused, 0, "{counts:?}");
    assert!(
        counts.accepted.len() >= 3,
        "requests were signed with {} sets of keys: {counts:?}",
        counts.accepted.len()
    );
    assert!(rounds > 0);
    gw.shutdown().await;
}

/// A client that keeps the keys it was given first is refused once they expire: the
/// origin of these tests enforces expiry.
async fn first_keys_expire(origin: &ExpiringOrigin, endpoints: &CredentialEndpoints) {
    let text = reqwest::Client::new()
        .get(endpoints.container_uri())
        .header("authorization", CONTAINER_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let fixed = OriginClient::new(OriginConfig::S3 {
        endpoint: origin.url(),
        region: "us-east-1".into(),
        credentials: Some(S3Credentials {
            access_key: json["AccessKeyId"].as_str().unwrap().into(),
            secret_key: json["SecretAccessKey"].as_str().unwrap().into(),
            session_token: json["Token"].as_str().map(str::to_owned),
        }),
        virtual_hosted: false,
    })
    .unwrap();
    fixed.head_bucket("creds").await.unwrap();
    let refused = wait_for(
        "the fixed keys to expire",
        Duration::from_secs(30),
        || async { fixed.head_bucket("creds").await.err() },
    )
    .await;
    assert_eq!(origin.counts().expired, 1, "{}", refused.message());
}

/// An anonymous stub behind an origin that takes only keys `issuer` gave out, and the
/// endpoints that give them out.
async fn s3_stage() -> (
    talon_origin_stub::RunningStub,
    Issuer,
    CredentialEndpoints,
    ExpiringOrigin,
) {
    let stub = talon_origin_stub::start(talon_origin_stub::StubConfig::default())
        .await
        .unwrap();
    let issuer = Issuer::new(LIFETIME);
    let endpoints = CredentialEndpoints::start(issuer.clone()).await;
    let origin = ExpiringOrigin::start(issuer.clone(), stub.s3_url().unwrap()).await;
    (stub, issuer, endpoints, origin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imds_credentials_are_refreshed_before_they_expire_and_no_request_fails() {
    let (_stub, issuer, endpoints, origin) = s3_stage().await;
    let env = BTreeMap::from([(
        "AWS_EC2_METADATA_SERVICE_ENDPOINT",
        endpoints.imds_endpoint(),
    )]);
    expiring_run(env, issuer, origin).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_credentials_are_refreshed_and_fixed_keys_are_refused_after_expiry() {
    let (stub, issuer, endpoints, origin) = s3_stage().await;
    let env = BTreeMap::from([
        (
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            endpoints.container_uri(),
        ),
        (
            "AWS_CONTAINER_AUTHORIZATION_TOKEN",
            CONTAINER_TOKEN.to_owned(),
        ),
    ]);
    let origin_url = origin.url();
    expiring_run(env, issuer.clone(), origin).await;
    // The same origin again, for the control.
    let origin = ExpiringOrigin::start(issuer, stub.s3_url().unwrap()).await;
    assert_ne!(origin.url(), origin_url);
    first_keys_expire(&origin, &endpoints).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_source_that_fails_refuses_to_start() {
    let env = BTreeMap::from([
        (
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "/nonexistent/talon/token".to_owned(),
        ),
        (
            "AWS_ROLE_ARN",
            "arn:aws:iam::123456789012:role/talon".to_owned(),
        ),
        ("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9".to_owned()),
    ]);
    let err = over_s3(anonymous_origin("http://127.0.0.1:9".into()))
        .with_default_s3_credentials(&|name| env.get(name).cloned())
        .await
        .unwrap_err();
    assert!(
        err.message().contains("/nonexistent/talon/token"),
        "{}",
        err.message()
    );
    // An instance metadata endpoint named explicitly that does not answer: the same.
    let env = BTreeMap::from([(
        "AWS_EC2_METADATA_SERVICE_ENDPOINT",
        "http://127.0.0.1:9".to_owned(),
    )]);
    let err = over_s3(anonymous_origin("http://127.0.0.1:9".into()))
        .with_default_s3_credentials(&|name| env.get(name).cloned())
        .await
        .unwrap_err();
    assert!(err.message().contains("IMDSv2"), "{}", err.message());
    // Nothing configured, a plain-HTTP origin: anonymous, as before (the instance
    // profile is not even asked: it is for origins reached over TLS).
    let origins = over_s3(anonymous_origin("http://127.0.0.1:9".into()))
        .with_default_s3_credentials(&|_| None)
        .await
        .unwrap();
    assert_eq!(origins.s3.unwrap().credential_stats(), None);
    // Entra ID tokens are never sent in the clear to a remote origin.
    let env = BTreeMap::from([
        ("AZURE_CLIENT_ID", "c".to_owned()),
        ("AZURE_TENANT_ID", "t".to_owned()),
        ("AZURE_CLIENT_SECRET", "s".to_owned()),
    ]);
    let err = over_azure(anonymous_azure_origin(format!(
        "http://storage.example.invalid/{ACCOUNT}"
    )))
    .with_default_azure_credentials(&|name| env.get(name).cloned(), None)
    .await
    .unwrap_err();
    assert!(err.message().contains("plain HTTP"), "{}", err.message());
}

/// Web identity (EKS IAM roles for service accounts) against moto's STS, which speaks
/// `AssumeRoleWithWebIdentity` and gives the lifetime asked for (moto's S3 does not
/// expire them, so this run shows the exchange and the refreshes; the runs above show
/// that refreshes beat expiry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_identity_keys_from_moto_sts_are_refreshed_while_reads_and_writes_go_on() {
    let Some(moto) = IndependentOrigin::start(OriginKind::Moto) else {
        return;
    };
    let endpoint = moto.client().config().clone();
    let OriginConfig::S3 { endpoint, .. } = endpoint else {
        unreachable!()
    };
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(
        &token_file,
        "eyJhbGciOiJSUzI1NiJ9.a-projected-service-account-token.sig",
    )
    .unwrap();
    let credentials = RefreshingCredentials::start(Box::new(WebIdentitySource {
        sts_endpoint: endpoint.clone(),
        role_arn: "arn:aws:iam::123456789012:role/talon".into(),
        session_name: "talon-test".into(),
        token_file,
        duration_seconds: Some(LIFETIME.as_secs() as u32),
    }))
    .await
    .unwrap();
    let first = credentials.current().unwrap().access_key.clone();
    assert!(first.starts_with("ASIA"), "{first}");
    let client = anonymous_origin(endpoint).with_s3_credentials(credentials.clone());
    let gw = gateway(over_s3(client), Backend::S3).await;
    make_bucket(&gw, "web-identity").await;
    read_and_write_until(&gw, "web-identity", || credentials.stats().refreshed >= 2).await;
    assert_ne!(credentials.current().unwrap().access_key, first);
    assert_eq!(credentials.stats().failed, 0);
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------
// Azure origins: Entra ID tokens (workload identity, service principal), a managed
// identity, and a SAS file, refreshed before they expire.

fn anonymous_azure_origin(endpoint: String) -> OriginClient {
    OriginClient::new(OriginConfig::Azure {
        endpoint,
        account: ACCOUNT.into(),
        key: None,
        sas: None,
    })
    .unwrap()
}

async fn azure_expiring_run(env: BTreeMap<&'static str, String>) {
    let stub = talon_origin_stub::start(talon_origin_stub::StubConfig::default())
        .await
        .unwrap();
    let issuer = Issuer::new(LIFETIME);
    let endpoints = CredentialEndpoints::start(issuer.clone()).await;
    let stub_base = stub.azure_url().unwrap();
    let stub_host = stub_base
        .trim_end_matches(&format!("/{ACCOUNT}"))
        .to_owned();
    let origin = ExpiringOrigin::start_for(Protocol::AzureBearer, issuer.clone(), stub_host).await;
    let mut env = env;
    env.insert("AZURE_AUTHORITY_HOST", endpoints.authority());
    if env.contains_key("IDENTITY_HEADER") {
        env.insert("IDENTITY_ENDPOINT", endpoints.identity_endpoint());
    }
    let origins = over_azure(anonymous_azure_origin(format!(
        "{}/{ACCOUNT}",
        origin.url()
    )))
    .with_default_azure_credentials(&|name| env.get(name).cloned(), None)
    .await
    .unwrap();
    let (_, client) = origins.azure.unwrap();
    assert!(client.credential_stats().is_some());
    let gw = gateway(over_azure(client), Backend::Azure).await;
    make_bucket(&gw, "azcreds").await;
    read_and_write_until(&gw, "azcreds", || issuer.issued() >= 4).await;
    let counts = origin.counts();
    assert_eq!(counts.expired, 0, "{counts:?}");
    assert_eq!(counts.refused, 0, "{counts:?}");
    assert!(counts.accepted.len() >= 3, "{counts:?}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_identity_tokens_are_refreshed_before_they_expire() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("azure-identity-token");
    std::fs::write(&file, FEDERATED_TOKEN).unwrap();
    azure_expiring_run(BTreeMap::from([
        (
            "AZURE_CLIENT_ID",
            "11111111-2222-3333-4444-555555555555".to_owned(),
        ),
        ("AZURE_TENANT_ID", "tenant-talon".to_owned()),
        ("AZURE_FEDERATED_TOKEN_FILE", file.display().to_string()),
    ]))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_principal_and_managed_identity_tokens_are_refreshed() {
    azure_expiring_run(BTreeMap::from([
        (
            "AZURE_CLIENT_ID",
            "11111111-2222-3333-4444-555555555555".to_owned(),
        ),
        ("AZURE_TENANT_ID", "tenant-talon".to_owned()),
        ("AZURE_CLIENT_SECRET", CLIENT_SECRET.to_owned()),
    ]))
    .await;
    azure_expiring_run(BTreeMap::from([(
        "IDENTITY_HEADER",
        IDENTITY_HEADER.to_owned(),
    )]))
    .await;
}

/// A SAS file rotated under the gateway: the new SAS is read before the old one expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_sas_file_is_read_again_before_the_old_sas_expires() {
    use talon_protocols::azure::sas::{SasGrant, generate_service_sas};
    use talon_protocols::azure::shared_key::AccountKey;
    let key = AccountKey::from_base64(talon_origin_stub::EMULATOR_AZURE_KEY).unwrap();
    let stub = talon_origin_stub::start(talon_origin_stub::StubConfig {
        azure_key: Some(key.clone()),
        ..talon_origin_stub::StubConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sas");
    let write_sas = |lifetime: Duration| {
        let sas = generate_service_sas(
            &SasGrant {
                account: ACCOUNT,
                container: "rotated",
                blob: None,
                permissions: "racwdl",
                start: None,
                expiry: std::time::SystemTime::now() + lifetime,
                version: "2025-01-05",
            },
            &key,
        );
        // Rotated as Kubernetes rotates a mounted Secret: whole, by a rename (a reader
        // of a file rewritten in place may see it empty; the refresher then retries
        // before the SAS in hand expires: credentials.rs's unit tests).
        let next = file.with_extension("next");
        std::fs::write(&next, sas).unwrap();
        std::fs::rename(&next, &file).unwrap();
    };
    // A container the service SAS can work in (a service SAS cannot create one).
    std::fs::create_dir_all(stub.data_dir().join("rotated")).unwrap();
    write_sas(LIFETIME);
    let origins = over_azure(anonymous_azure_origin(stub.azure_url().unwrap()))
        .with_default_azure_credentials(&|_| None, Some(&file))
        .await
        .unwrap();
    let (_, client) = origins.azure.unwrap();
    let stats = || client.credential_stats().unwrap();
    let gw = gateway(over_azure(client.clone()), Backend::Azure).await;
    // The rotator writes a fresh SAS every second; the gateway must pick one up before
    // each one it holds expires.
    let mut rotated_at = std::time::Instant::now();
    read_and_write_until(&gw, "rotated", || {
        if rotated_at.elapsed() >= Duration::from_secs(1) {
            write_sas(LIFETIME);
            rotated_at = std::time::Instant::now();
        }
        stats().refreshed >= 3
    })
    .await;
    assert_eq!(stats().failed, 0);
    gw.shutdown().await;
}
