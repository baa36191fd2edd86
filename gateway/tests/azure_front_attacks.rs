//! Attacks on the Azure front's authorization, from the red-team review of 2026-12-04,
//! each against a gateway over the origin stub (route origin, an S3 origin: the Azure
//! front's blocks are then staged as objects), with the stub's folder checked after
//! every refusal:
//!
//! - RT-04: a decoded newline in a query value made one Shared Key string to sign for
//!   two requests, so a captured Get Block List replayed as Get Blob;
//! - RT-05: a create-only SAS (`sp=c`) overwrote an existing blob;
//! - RT-10: the objects a Put Block stages were readable (and writable) through either
//!   front by anyone who may read the container.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime};

use http::HeaderMap;
use talon_gateway::config::{
    AzureAccount, AzureFront, Backend, Identities, IdentitiesFile, Limits, Route, S3Front, S3Key,
};
use talon_gateway::{GatewayConfig, RunningGateway};
use talon_origin_stub::{EMULATOR_AZURE_KEY, RunningStub, StubConfig};
use talon_protocols::azure::request::AzureAddressing;
use talon_protocols::azure::sas::{SasGrant, generate_service_sas};
use talon_protocols::azure::shared_key::{AccountKey, SharedKeyParts, authorization};
use talon_protocols::block_staging::{BlobStaging, is_staging_key};
use talon_protocols::origin::{OriginClient, OriginConfig, Origins};
use talon_protocols::s3::request::S3Addressing;
use talon_protocols::s3::sigv4::S3Credentials;

const ACCOUNT: &str = "devstoreaccount1";
const VERSION: &str = "2021-08-06";
const HELLO: &[u8] = b"hello, world";

struct Setup {
    stub: RunningStub,
    gw: RunningGateway,
    key: AccountKey,
    http: reqwest::Client,
}

impl Setup {
    async fn start() -> Setup {
        let stub = talon_origin_stub::start(StubConfig::default())
            .await
            .unwrap();
        std::fs::create_dir_all(stub.data_dir().join("demo")).unwrap();
        std::fs::write(stub.data_dir().join("demo/hello.txt"), HELLO).unwrap();
        let s3 = OriginClient::new(OriginConfig::S3 {
            endpoint: stub.s3_url().unwrap(),
            region: "us-east-1".into(),
            credentials: None,
            virtual_hosted: false,
        })
        .unwrap();
        let identities = IdentitiesFile {
            s3: vec![S3Key::unrestricted("AK", "SK")],
            azure: Some(AzureAccount {
                account: ACCOUNT.into(),
                key: Some(EMULATOR_AZURE_KEY.into()),
                ..AzureAccount::default()
            }),
            ..IdentitiesFile::default()
        };
        let gw = talon_gateway::start(GatewayConfig {
            s3: Some(S3Front {
                listen: "127.0.0.1:0".parse().unwrap(),
                route: Route::Origin,
                backend: Backend::S3,
                addressing: S3Addressing::PathStyle,
                region: "us-east-1".into(),
            }),
            azure: Some(AzureFront {
                listen: "127.0.0.1:0".parse().unwrap(),
                route: Route::Origin,
                backend: Backend::S3,
                addressing: AzureAddressing::default(),
            }),
            admin_listen: None,
            origins: Origins {
                s3: Some(s3),
                azure: None,
            },
            cache: None,
            identities: Identities::from_parts(identities).unwrap(),
            freshness: talon_gateway::Freshness::within(Duration::from_millis(100)),
            limits: Limits::default(),
            tls: None,
            acl_file: None,
            cache_status: true,
            access_log: None,
        })
        .await
        .unwrap();
        Setup {
            stub,
            gw,
            key: AccountKey::from_base64(EMULATOR_AZURE_KEY).unwrap(),
            http: reqwest::Client::new(),
        }
    }

    fn url(&self, path_and_query: &str) -> String {
        format!("{}{path_and_query}", self.gw.azure_url().unwrap())
    }

    /// A Shared Key signed request for `path` (from the container on) and the raw
    /// `query`.
    fn signed(&self, method: http::Method, path: &str, query: &str) -> reqwest::Request {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-ms-date",
            httpdate::fmt_http_date(SystemTime::now()).parse().unwrap(),
        );
        headers.insert("x-ms-version", VERSION.parse().unwrap());
        // The front's URL names the account first (path style, as the emulator's).
        let raw_path = format!("/{ACCOUNT}{path}");
        let auth = authorization(
            &SharedKeyParts {
                method: method.as_str(),
                raw_path: &raw_path,
                raw_query: query,
                headers: &headers,
            },
            ACCOUNT,
            &self.key,
        );
        headers.insert("authorization", auth.parse().unwrap());
        self.http
            .request(method, self.url(&format!("{path}?{query}")))
            .headers(headers)
            .build()
            .unwrap()
    }

    fn sas(&self, permissions: &str) -> String {
        generate_service_sas(
            &SasGrant {
                account: ACCOUNT,
                container: "demo",
                blob: None,
                permissions,
                start: None,
                expiry: SystemTime::now() + Duration::from_secs(600),
                version: VERSION,
            },
            &self.key,
        )
    }

    fn hello_unchanged(&self) {
        assert_eq!(
            std::fs::read(self.stub.data_dir().join("demo/hello.txt")).unwrap(),
            HELLO
        );
    }
}

/// The same request with its URL's query replaced; every header (the signature too)
/// kept.
fn with_query(request: &reqwest::Request, query: &str) -> reqwest::Request {
    let mut replay = request.try_clone().unwrap();
    replay.url_mut().set_query(Some(query));
    replay
}

#[tokio::test]
async fn a_captured_shared_key_request_cannot_be_replayed_with_a_reshaped_query() {
    let s = Setup::start().await;
    // The victim's Get Block List, answered as signed.
    let victim = s.signed(
        http::Method::GET,
        "/demo/hello.txt",
        "comp=blocklist&blocklisttype=all",
    );
    let resp = s.http.execute(victim.try_clone().unwrap()).await.unwrap();
    let status = resp.status();
    let body = resp.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("<BlockList>"), "{body}");
    // Replayed with `comp` folded into another parameter's value: the same string to
    // sign, another operation (a Get Blob) — refused before anything is read.
    for query in [
        "blocklisttype=all%0Acomp%3Ablocklist",
        "blocklisttype=all%0D%0Acomp%3Ablocklist",
        "blocklisttype%3Aall%0Acomp=blocklist",
    ] {
        let resp = s.http.execute(with_query(&victim, query)).await.unwrap();
        let status = resp.status();
        let body = resp.bytes().await.unwrap();
        assert_eq!(status, 400, "{query}: {}", String::from_utf8_lossy(&body));
        assert!(
            !body.windows(HELLO.len()).any(|w| w == HELLO),
            "{query}: the blob's bytes were served"
        );
    }
    s.hello_unchanged();
}

#[tokio::test]
async fn a_create_only_sas_creates_new_blobs_and_never_overwrites() {
    let s = Setup::start().await;
    let sas = s.sas("c");
    let put = |blob: &str, body: &'static [u8]| {
        s.http
            .put(s.url(&format!("/demo/{blob}?{sas}")))
            .header("x-ms-blob-type", "BlockBlob")
            .header("x-ms-version", VERSION)
            .body(body)
            .send()
    };
    let resp = put("hello.txt", b"overwritten with a create-only SAS")
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.text().await.unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("AuthorizationPermissionMismatch"), "{body}");
    s.hello_unchanged();
    // A new blob is what `c` is for.
    let resp = put("fresh.txt", b"new").await.unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(
        std::fs::read(s.stub.data_dir().join("demo/fresh.txt")).unwrap(),
        b"new"
    );
    // `w` still overwrites.
    let sas = s.sas("w");
    let resp = s
        .http
        .put(s.url(&format!("/demo/fresh.txt?{sas}")))
        .header("x-ms-blob-type", "BlockBlob")
        .header("x-ms-version", VERSION)
        .body(&b"newer"[..])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
}

#[tokio::test]
async fn staged_blocks_are_reachable_through_no_front() {
    let s = Setup::start().await;
    // A writer stages a block (uncommitted) of a blob.
    let block_id = "YmxvY2stMDAwMDAx";
    let writer = s.sas("w");
    let resp = s
        .http
        .put(s.url(&format!(
            "/demo/salaries.csv?comp=block&blockid={block_id}&{writer}"
        )))
        .header("x-ms-version", VERSION)
        .body(&b"name,salary\nalice,250000\n"[..])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let staged = BlobStaging::of("salaries.csv").block_key(block_id).unwrap();
    let on_disk = s.stub.data_dir().join("demo").join(&staged);
    assert!(
        on_disk.exists(),
        "the block is staged at {}",
        on_disk.display()
    );

    // A reader with a read-only SAS, and an S3 client with full keys, cannot read,
    // overwrite or delete it.
    let reader = s.sas("rl");
    let resp = s
        .http
        .get(s.url(&format!("/demo/{staged}?{reader}")))
        .header("x-ms-version", VERSION)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.text().await.unwrap();
    assert!(matches!(status.as_u16(), 403 | 404), "{status}: {body}");
    assert!(!body.contains("alice"), "{body}");
    let all = s.sas("rwd");
    for request in [
        s.http
            .put(s.url(&format!("/demo/{staged}?{all}")))
            .header("x-ms-blob-type", "BlockBlob")
            .body("forged"),
        s.http.delete(s.url(&format!("/demo/{staged}?{all}"))),
    ] {
        let resp = request
            .header("x-ms-version", VERSION)
            .send()
            .await
            .unwrap();
        assert!(
            matches!(resp.status().as_u16(), 403 | 404),
            "{}",
            resp.status()
        );
    }
    // Nor through the S3 front, signed with full keys.
    let s3 = OriginClient::new(OriginConfig::S3 {
        endpoint: s.gw.s3_url().unwrap(),
        region: "us-east-1".into(),
        credentials: Some(S3Credentials {
            access_key: "AK".into(),
            secret_key: "SK".into(),
            session_token: None,
        }),
        virtual_hosted: false,
    })
    .unwrap();
    let refused = s3
        .get("demo", &staged, None, None)
        .await
        .expect_err("refused");
    assert_eq!(
        refused.kind(),
        talon_protocols::ErrorKind::AccessDenied,
        "{refused}"
    );
    let refused = s3
        .put("demo", &staged, bytes::Bytes::from_static(b"forged"), None)
        .await
        .expect_err("refused");
    assert_eq!(
        refused.kind(),
        talon_protocols::ErrorKind::AccessDenied,
        "{refused}"
    );
    assert_eq!(
        std::fs::read(&on_disk).unwrap(),
        b"name,salary\nalice,250000\n",
        "the staged block changed"
    );
    // No listing names it: ListObjects and ListObjectVersions alike (the second was
    // relayed to the origin as it was, staged keys included).
    let listed = s3.list("demo", "", None, None, None).await.unwrap();
    assert!(
        listed.objects.iter().all(|o| !is_staging_key(&o.key)),
        "{:?}",
        listed.objects
    );
    let versions = s3
        .forward(talon_protocols::origin::ForwardRequest {
            method: http::Method::GET,
            bucket: Some("demo"),
            key: None,
            query: "versions",
            headers: Vec::new(),
            body: talon_protocols::origin::OriginBody::Empty,
        })
        .await
        .unwrap();
    assert_eq!(versions.status(), 200);
    let versions = versions.text().await.unwrap();
    assert!(versions.contains("<ListVersionsResult"), "{versions}");
    assert!(!versions.contains(".talon-blocks"), "{versions}");
    // The writer's own Put Block List still commits it.
    let list = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList><Latest>{block_id}</Latest></BlockList>"
    );
    let resp = s
        .http
        .put(s.url(&format!("/demo/salaries.csv?comp=blocklist&{writer}")))
        .header("x-ms-version", VERSION)
        .body(list)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(
        std::fs::read(s.stub.data_dir().join("demo/salaries.csv")).unwrap(),
        b"name,salary\nalice,250000\n"
    );
}
