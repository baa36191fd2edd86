//! One access policy for both fronts (SEC-02 and SEC-13 of the security review): a
//! front with no credentials does not start unless anonymous access is asked for;
//! anonymous access is read-only unless writes are asked for; S3 credentials never
//! leave the Azure front open over the same data; `response-*` overrides need a
//! signature. Every refusal is checked at the origin's folder too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use talon_gateway::config::{
    AzureAccount, AzureFront, Backend, Identities, IdentitiesFile, Limits, Route, S3Front, S3Key,
};
use talon_gateway::{GatewayConfig, GatewayError, RunningGateway};
use talon_origin_stub::{EMULATOR_AZURE_KEY, RunningStub, StubConfig};
use talon_protocols::access::AnonymousAccess;
use talon_protocols::azure::request::AzureAddressing;
use talon_protocols::origin::{OriginClient, OriginConfig, Origins};
use talon_protocols::s3::request::S3Addressing;

const ACCOUNT: &str = "devstoreaccount1";
const HELLO: &[u8] = b"hello, world";

async fn stub() -> RunningStub {
    let stub = talon_origin_stub::start(StubConfig::default())
        .await
        .unwrap();
    std::fs::create_dir_all(stub.data_dir().join("demo")).unwrap();
    std::fs::write(stub.data_dir().join("demo/hello.txt"), HELLO).unwrap();
    stub
}

fn config(stub: &RunningStub, identities: IdentitiesFile) -> GatewayConfig {
    let s3 = OriginClient::new(OriginConfig::S3 {
        endpoint: stub.s3_url().unwrap(),
        region: "us-east-1".into(),
        credentials: None,
        virtual_hosted: false,
    })
    .unwrap();
    GatewayConfig {
        s3: Some(S3Front {
            listen: "127.0.0.1:0".parse().unwrap(),
            route: Route::Origin,
            backend: Backend::S3,
            addressing: S3Addressing::PathStyle,
            region: "us-east-1".into(),
        }),
        // The Azure front over the S3 origin: the same data as the S3 front.
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
    }
}

fn s3_keys() -> Vec<S3Key> {
    vec![S3Key::unrestricted("AK", "SK")]
}

/// Unsigned requests of every kind against both fronts; returns (what, status).
async fn unsigned(gw: &RunningGateway) -> Vec<(String, u16)> {
    let http = reqwest::Client::new();
    let s3 = gw.s3_url().unwrap();
    let az = gw.azure_url().unwrap();
    let requests = [
        http.get(format!("{s3}/demo/hello.txt")),
        http.put(format!("{s3}/demo/new.txt")).body("x"),
        http.delete(format!("{s3}/demo/hello.txt")),
        http.get(format!("{az}/demo/hello.txt")),
        http.put(format!("{az}/demo/new.txt"))
            .header("x-ms-blob-type", "BlockBlob")
            .body("x"),
        http.delete(format!("{az}/demo/hello.txt")),
        http.put(format!("{az}/newcontainer?restype=container")),
    ];
    let mut out = Vec::new();
    for r in requests {
        let r = r.header("x-ms-version", "2021-08-06").build().unwrap();
        let what = format!("{} {}", r.method(), r.url());
        out.push((what, http.execute(r).await.unwrap().status().as_u16()));
    }
    out
}

fn assert_unchanged(stub: &RunningStub) {
    assert_eq!(
        std::fs::read(stub.data_dir().join("demo/hello.txt")).unwrap(),
        HELLO
    );
    assert!(!stub.data_dir().join("demo/new.txt").exists());
    assert!(!stub.data_dir().join("newcontainer").exists());
}

#[tokio::test]
async fn a_front_without_credentials_refuses_to_start() {
    let stub = stub().await;
    // S3 keys only, the Azure front on: the Azure front has nobody to authenticate.
    let only_s3 = IdentitiesFile {
        s3: s3_keys(),
        ..IdentitiesFile::default()
    };
    let err = talon_gateway::start(config(&stub, only_s3)).await.err();
    assert!(
        matches!(&err, Some(GatewayError::Config(m)) if m.contains("Azure front")),
        "{err:?}"
    );
    let nothing = IdentitiesFile::default();
    let err = talon_gateway::start(config(&stub, nothing)).await.err();
    assert!(
        matches!(&err, Some(GatewayError::Config(m)) if m.contains("S3 front")),
        "{err:?}"
    );
}

#[tokio::test]
async fn with_credentials_neither_front_serves_anyone_anonymous() {
    let stub = stub().await;
    let gw = talon_gateway::start(config(
        &stub,
        IdentitiesFile {
            s3: s3_keys(),
            azure: Some(AzureAccount {
                account: ACCOUNT.into(),
                key: Some(EMULATOR_AZURE_KEY.into()),
                ..AzureAccount::default()
            }),
            anonymous: AnonymousAccess::Refused,
            public: Vec::new(),
        },
    ))
    .await
    .unwrap();
    for (what, status) in unsigned(&gw).await {
        assert!(matches!(status, 401 | 403), "{what}: {status}");
    }
    assert_unchanged(&stub);
    gw.shutdown().await;
}

#[tokio::test]
async fn anonymous_access_is_read_only_unless_writes_are_asked_for() {
    let stub = stub().await;
    let gw = talon_gateway::start(config(
        &stub,
        IdentitiesFile {
            anonymous: AnonymousAccess::ReadOnly,
            ..IdentitiesFile::default()
        },
    ))
    .await
    .unwrap();
    for (what, status) in unsigned(&gw).await {
        let expected = if what.starts_with("GET") { 200 } else { 403 };
        assert_eq!(status, expected, "{what}");
    }
    assert_unchanged(&stub);
    gw.shutdown().await;

    let gw = talon_gateway::start(config(
        &stub,
        IdentitiesFile {
            anonymous: AnonymousAccess::ReadWrite,
            ..IdentitiesFile::default()
        },
    ))
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let put = http
        .put(format!("{}/demo/new.txt", gw.s3_url().unwrap()))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    assert_eq!(
        std::fs::read(stub.data_dir().join("demo/new.txt")).unwrap(),
        b"x"
    );
    gw.shutdown().await;
}

/// SEC-09's last part: an unsigned `response-content-type=text/html` must not turn a
/// readable object into a page served from the gateway's origin.
#[tokio::test]
async fn response_overrides_are_ignored_on_anonymous_requests() {
    let stub = stub().await;
    let gw = talon_gateway::start(config(
        &stub,
        IdentitiesFile {
            anonymous: AnonymousAccess::ReadOnly,
            ..IdentitiesFile::default()
        },
    ))
    .await
    .unwrap();
    let url = format!(
        "{}/demo/hello.txt?response-content-type=text%2Fhtml&response-content-disposition=inline",
        gw.s3_url().unwrap()
    );
    let resp = reqwest::get(url).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_ne!(resp.headers()["content-type"], "text/html");
    assert!(resp.headers().get("content-disposition").is_none());
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------
// Grants: the permission matrix (identity × action × resource → status) on both fronts.

use std::collections::BTreeMap;

use talon_protocols::azure::sas::{SasGrant, generate_service_sas};
use talon_protocols::azure::shared_key::AccountKey;
use talon_protocols::origin::{ForwardRequest, OriginBody};
use talon_protocols::s3::sigv4::S3Credentials;

/// Four S3 keys with grants, an Azure key that may not delete, SAS bounded to `train/`,
/// and one public bucket.
const GRANTS_FILE: &str = r#"{
  "s3": [
    {"access_key": "reader", "secret_key": "r", "grants": [
      {"bucket": "shared", "prefix": "train/", "actions": ["read", "list"]}]},
    {"access_key": "writer", "secret_key": "w", "grants": [
      {"bucket": "shared", "actions": ["read", "list", "write", "delete"]}]},
    {"access_key": "cleaner", "secret_key": "c", "grants": [
      {"bucket": "shared", "prefix": "test/", "actions": ["delete"]}]},
    {"access_key": "admin", "secret_key": "a", "grants": [
      {"bucket": "*", "actions": ["read", "list", "write", "delete", "admin"]}]},
    {"access_key": "nobody", "secret_key": "n", "grants": []}
  ],
  "azure": {"account": "devstoreaccount1", "key": "KEY",
    "grants": [{"bucket": "shared", "actions": ["read", "list", "write"]}],
    "sas_grants": [{"bucket": "shared", "prefix": "train/", "actions": ["read", "list"]}]},
  "public": [{"bucket": "open", "actions": ["read", "list"]}]
}"#;

async fn stub_with_buckets() -> RunningStub {
    let stub = talon_origin_stub::start(StubConfig::default())
        .await
        .unwrap();
    for (path, body) in [
        ("shared/train/a.bin", "train a"),
        ("shared/test/b.bin", "test b"),
        ("private/secret.bin", "secret"),
        ("open/readme.txt", "open to all"),
    ] {
        let path = stub.data_dir().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
    stub
}

/// Every file under the origin's folder and its bytes.
fn origin_files(stub: &RunningStub) -> BTreeMap<String, Vec<u8>> {
    fn walk(dir: &std::path::Path, root: &std::path::Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, out);
            } else {
                let name = path.strip_prefix(root).unwrap().display().to_string();
                out.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(stub.data_dir(), stub.data_dir(), &mut out);
    out
}

fn s3_client(gw: &RunningGateway, key: Option<(&str, &str)>) -> OriginClient {
    OriginClient::new(OriginConfig::S3 {
        endpoint: gw.s3_url().unwrap(),
        region: "us-east-1".into(),
        credentials: key.map(|(a, s)| S3Credentials {
            access_key: a.into(),
            secret_key: s.into(),
            session_token: None,
        }),
        virtual_hosted: false,
    })
    .unwrap()
}

fn azure_client(gw: &RunningGateway, key: bool, sas: Option<String>) -> OriginClient {
    OriginClient::new(OriginConfig::Azure {
        endpoint: gw.azure_url().unwrap(),
        account: ACCOUNT.into(),
        key: key.then(|| AccountKey::from_base64(EMULATOR_AZURE_KEY).unwrap()),
        sas,
    })
    .unwrap()
}

/// One request of the matrix.
struct Call<'a> {
    method: reqwest::Method,
    bucket: Option<&'a str>,
    key: Option<&'a str>,
    query: &'a str,
    headers: Vec<(&'a str, String)>,
    body: &'static str,
}

fn call<'a>(method: &str, path: &'a str, query: &'a str) -> Call<'a> {
    let (bucket, key) = match path.split_once('/') {
        Some((b, k)) => (Some(b), Some(k)),
        None if path.is_empty() => (None, None),
        None => (Some(path), None),
    };
    Call {
        method: method.parse().unwrap(),
        bucket,
        key,
        query,
        headers: Vec::new(),
        body: "",
    }
}

impl<'a> Call<'a> {
    fn header(mut self, name: &'a str, value: impl Into<String>) -> Call<'a> {
        self.headers.push((name, value.into()));
        self
    }

    fn body(mut self, body: &'static str) -> Call<'a> {
        self.body = body;
        self
    }

    /// Sends it; returns the status and the body.
    async fn send(self, client: &OriginClient) -> (u16, String) {
        let response = client
            .forward(ForwardRequest {
                method: self.method,
                bucket: self.bucket,
                key: self.key,
                query: self.query,
                headers: self
                    .headers
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
                body: if self.body.is_empty() {
                    OriginBody::Empty
                } else {
                    OriginBody::Bytes(bytes::Bytes::from_static(self.body.as_bytes()))
                },
            })
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    }
}

/// Sends `call` and checks its status; a refusal (403) must carry `code` and leave
/// every file of the origin as it was.
async fn expect(
    stub: &RunningStub,
    client: &OriginClient,
    what: &str,
    c: Call<'_>,
    status: u16,
    code: &str,
) {
    let before = origin_files(stub);
    let (got, body) = c.send(client).await;
    assert_eq!(got, status, "{what}: {body}");
    if status == 403 {
        assert!(
            body.contains(&format!("<Code>{code}</Code>")),
            "{what}: {body}"
        );
        assert_eq!(origin_files(stub), before, "{what} changed the origin");
    }
}

fn listed_names(body: &str, tag: &str) -> Vec<String> {
    body.split(&format!("<{tag}>"))
        .skip(1)
        .filter_map(|s| {
            s.split_once(&format!("</{tag}>"))
                .map(|(n, _)| n.to_owned())
        })
        .collect()
}

async fn gateway_with_grants(stub: &RunningStub) -> RunningGateway {
    let text = GRANTS_FILE.replace("KEY", EMULATOR_AZURE_KEY);
    let file = IdentitiesFile::parse(&text).unwrap();
    talon_gateway::start(config(stub, file)).await.unwrap()
}

#[tokio::test]
async fn the_s3_front_allows_what_each_key_was_granted_and_nothing_else() {
    let stub = stub_with_buckets().await;
    let gw = gateway_with_grants(&stub).await;
    let reader = s3_client(&gw, Some(("reader", "r")));
    let writer = s3_client(&gw, Some(("writer", "w")));
    let admin = s3_client(&gw, Some(("admin", "a")));
    let nobody = s3_client(&gw, Some(("nobody", "n")));
    let anonymous = s3_client(&gw, None);
    let copy = |to, from: &str| call("PUT", to, "").header("x-amz-copy-source", from.to_owned());
    let denied = "AccessDenied";
    // Who, what, the request, and the answer: every 403 also leaves the origin as it was.
    let refusals = [
        // read and list, under the reader's prefix only
        (&reader, "GET test/", call("GET", "shared/test/b.bin", "")),
        (&reader, "list all", call("GET", "shared", "list-type=2")),
        (
            &reader,
            "list tr",
            call("GET", "shared", "list-type=2&prefix=tr"),
        ),
        (
            &reader,
            "PUT",
            call("PUT", "shared/train/new.bin", "").body("x"),
        ),
        (&reader, "DELETE", call("DELETE", "shared/train/a.bin", "")),
        (
            &reader,
            "GET elsewhere",
            call("GET", "private/secret.bin", ""),
        ),
        (
            &reader,
            "multipart",
            call("POST", "shared/train/m.bin", "uploads"),
        ),
        (&reader, "create bucket", call("PUT", "made", "")),
        // write and delete in its bucket, nothing outside it, no administration
        (
            &writer,
            "PUT elsewhere",
            call("PUT", "private/x.txt", "").body("x"),
        ),
        (
            &writer,
            "GET elsewhere",
            call("GET", "private/secret.bin", ""),
        ),
        (&writer, "create bucket", call("PUT", "made", "")),
        (&writer, "delete bucket", call("DELETE", "open", "")),
        (&writer, "read ACL", call("GET", "shared", "acl")),
        // a copy needs read on the source and write on the destination
        (
            &writer,
            "copy out",
            copy("private/copy.bin", "/shared/train/a.bin"),
        ),
        (
            &writer,
            "copy in",
            copy("shared/copy.bin", "/private/secret.bin"),
        ),
        (
            &writer,
            "copy a part in",
            call("PUT", "shared/part.bin", "partNumber=1&uploadId=u")
                .header("x-amz-copy-source", "/private/secret.bin"),
        ),
        (&nobody, "GET", call("GET", "shared/train/a.bin", "")),
        (&nobody, "list buckets", call("GET", "", "")),
        // anonymous: the public bucket's reads and listings, nothing else
        (
            &anonymous,
            "PUT public",
            call("PUT", "open/x.txt", "").body("x"),
        ),
        (
            &anonymous,
            "DELETE public",
            call("DELETE", "open/readme.txt", ""),
        ),
        (
            &anonymous,
            "GET private",
            call("GET", "shared/train/a.bin", ""),
        ),
        (&anonymous, "list buckets", call("GET", "", "")),
    ];
    for (who, what, c) in refusals {
        expect(&stub, who, what, c, 403, denied).await;
    }
    let allowed = [
        (
            &reader,
            "GET train/",
            call("GET", "shared/train/a.bin", ""),
            200,
        ),
        (&reader, "HEAD bucket", call("HEAD", "shared", ""), 200),
        (
            &reader,
            "list train/",
            call("GET", "shared", "list-type=2&prefix=train%2F"),
            200,
        ),
        (
            &writer,
            "PUT",
            call("PUT", "shared/new.txt", "").body("new"),
            200,
        ),
        (
            &writer,
            "copy within",
            copy("shared/copy.bin", "/shared/test/b.bin"),
            200,
        ),
        (
            &anonymous,
            "GET public",
            call("GET", "open/readme.txt", ""),
            200,
        ),
        (
            &anonymous,
            "list public",
            call("GET", "open", "list-type=2"),
            200,
        ),
        (&admin, "create bucket", call("PUT", "made", ""), 200),
        (
            &admin,
            "GET elsewhere",
            call("GET", "private/secret.bin", ""),
            200,
        ),
    ];
    for (who, what, c, status) in allowed {
        expect(&stub, who, what, c, status, "").await;
    }
    let file = |p: &str| std::fs::read(stub.data_dir().join(p)).unwrap();
    assert_eq!(file("shared/new.txt"), b"new");
    assert_eq!(file("shared/copy.bin"), b"test b");
    assert!(stub.data_dir().join("made").is_dir());
    expect(
        &stub,
        &writer,
        "writer DELETE",
        call("DELETE", "shared/new.txt", ""),
        204,
        "",
    )
    .await;
    assert!(!stub.data_dir().join("shared/new.txt").exists());
    expect(
        &stub,
        &admin,
        "admin deletes bucket",
        call("DELETE", "made", ""),
        204,
        "",
    )
    .await;

    // ListBuckets shows what each may list
    for (who, client, buckets) in [
        ("reader", &reader, vec!["shared"]),
        ("writer", &writer, vec!["shared"]),
        ("admin", &admin, vec!["open", "private", "shared"]),
    ] {
        let (status, body) = call("GET", "", "").send(client).await;
        assert_eq!(status, 200, "{who}: {body}");
        assert_eq!(listed_names(&body, "Name"), buckets, "{who}");
    }
    gw.shutdown().await;
}

#[tokio::test]
async fn delete_objects_deletes_the_granted_keys_and_refuses_each_other_one() {
    let stub = stub_with_buckets().await;
    let gw = gateway_with_grants(&stub).await;
    let cleaner = s3_client(&gw, Some(("cleaner", "c")));
    let reader = s3_client(&gw, Some(("reader", "r")));
    let doc = "<Delete><Object><Key>test/b.bin</Key></Object><Object><Key>train/a.bin</Key></Object></Delete>";
    let md5 = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        <md5::Md5 as md5::Digest>::digest(doc.as_bytes()),
    );
    let delete = || call("POST", "shared", "delete").header("content-md5", md5.clone());
    // no delete grant anywhere in the bucket: the whole request is refused
    expect(
        &stub,
        &reader,
        "reader DeleteObjects",
        delete().body(doc),
        403,
        "AccessDenied",
    )
    .await;
    let (status, body) = delete().body(doc).send(&cleaner).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        listed_names(&body, "Key"),
        ["test/b.bin", "train/a.bin"],
        "{body}"
    );
    assert!(
        body.contains("<Error><Key>train/a.bin</Key><Code>AccessDenied</Code>"),
        "{body}"
    );
    assert!(!stub.data_dir().join("shared/test/b.bin").exists());
    assert_eq!(
        std::fs::read(stub.data_dir().join("shared/train/a.bin")).unwrap(),
        b"train a"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn the_azure_front_applies_the_key_s_and_the_sas_grants() {
    let stub = stub_with_buckets().await;
    let gw = gateway_with_grants(&stub).await;
    let keyed = azure_client(&gw, true, None);
    let key = AccountKey::from_base64(EMULATOR_AZURE_KEY).unwrap();
    let sas = generate_service_sas(
        &SasGrant {
            account: ACCOUNT,
            container: "shared",
            blob: None,
            permissions: "racwdl",
            start: None,
            expiry: std::time::SystemTime::now() + Duration::from_secs(3600),
            version: "2025-01-05",
        },
        &key,
    );
    let sas_client = azure_client(&gw, false, Some(sas));
    let anonymous = azure_client(&gw, false, None);
    let put = |path| {
        call("PUT", path, "")
            .header("x-ms-blob-type", "BlockBlob")
            .body("az")
    };
    let list = |container, prefix| call("GET", container, prefix);
    let source = format!("{}/private/secret.bin", gw.azure_url().unwrap());
    let (mismatch, failure) = ("AuthorizationPermissionMismatch", "AuthorizationFailure");
    let matrix = [
        // the Shared Key identity: read, list and write in `shared`; no delete, no admin
        (
            &keyed,
            "key GET",
            call("GET", "shared/test/b.bin", ""),
            200,
            "",
        ),
        (
            &keyed,
            "key lists",
            list("shared", "restype=container&comp=list"),
            200,
            "",
        ),
        (&keyed, "key PUT", put("shared/az.txt"), 201, ""),
        (
            &keyed,
            "key DELETE",
            call("DELETE", "shared/az.txt", ""),
            403,
            mismatch,
        ),
        (
            &keyed,
            "key GET elsewhere",
            call("GET", "private/secret.bin", ""),
            403,
            mismatch,
        ),
        (
            &keyed,
            "key PUT elsewhere",
            put("private/az.txt"),
            403,
            mismatch,
        ),
        (
            &keyed,
            "key creates",
            call("PUT", "made", "restype=container"),
            403,
            mismatch,
        ),
        (
            &keyed,
            "key copies in",
            call("PUT", "shared/copied.bin", "").header("x-ms-copy-source", source.clone()),
            403,
            "CannotVerifyCopySource",
        ),
        // a SAS: its own permissions, bounded by sas_grants (train/, read and list)
        (
            &sas_client,
            "SAS GET train/",
            call("GET", "shared/train/a.bin", ""),
            200,
            "",
        ),
        (
            &sas_client,
            "SAS GET test/",
            call("GET", "shared/test/b.bin", ""),
            403,
            mismatch,
        ),
        (
            &sas_client,
            "SAS lists train/",
            list("shared", "restype=container&comp=list&prefix=train%2F"),
            200,
            "",
        ),
        (
            &sas_client,
            "SAS lists all",
            list("shared", "restype=container&comp=list"),
            403,
            mismatch,
        ),
        (
            &sas_client,
            "SAS PUT",
            put("shared/train/sas.txt"),
            403,
            mismatch,
        ),
        (
            &sas_client,
            "SAS DELETE",
            call("DELETE", "shared/train/a.bin", ""),
            403,
            mismatch,
        ),
        // anonymous: the public container only, reads and listings
        (
            &anonymous,
            "anonymous GET public",
            call("GET", "open/readme.txt", ""),
            200,
            "",
        ),
        (
            &anonymous,
            "anonymous lists public",
            list("open", "restype=container&comp=list"),
            200,
            "",
        ),
        (
            &anonymous,
            "anonymous PUT public",
            put("open/x.txt"),
            403,
            failure,
        ),
        (
            &anonymous,
            "anonymous GET private",
            call("GET", "shared/train/a.bin", ""),
            403,
            failure,
        ),
        (
            &anonymous,
            "anonymous lists containers",
            list("", "comp=list"),
            403,
            failure,
        ),
    ];
    for (who, what, c, status, code) in matrix {
        expect(&stub, who, what, c, status, code).await;
    }
    assert_eq!(
        std::fs::read(stub.data_dir().join("shared/az.txt")).unwrap(),
        b"az"
    );
    let (status, body) = call("GET", "", "comp=list").send(&keyed).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(listed_names(&body, "Name"), ["shared"]);
    gw.shutdown().await;
}

#[tokio::test]
async fn replaced_identities_apply_to_the_next_request_on_an_open_connection() {
    let stub = stub_with_buckets().await;
    let gw = gateway_with_grants(&stub).await;
    // One client: its connection stays open across the replacement.
    let reader = s3_client(&gw, Some(("reader", "r")));
    let (status, _) = call("GET", "shared/test/b.bin", "").send(&reader).await;
    assert_eq!(status, 403);
    let widened = GRANTS_FILE.replace("KEY", EMULATOR_AZURE_KEY).replace(
        r#""prefix": "train/", "actions": ["read", "list"]}]},
    {"access_key": "writer""#,
        r#""actions": ["read", "list"]}]},
    {"access_key": "writer""#,
    );
    assert_ne!(widened, GRANTS_FILE.replace("KEY", EMULATOR_AZURE_KEY));
    let identities = Identities::from_parts(IdentitiesFile::parse(&widened).unwrap()).unwrap();
    gw.replace_identities(identities).unwrap();
    let (status, body) = call("GET", "shared/test/b.bin", "").send(&reader).await;
    assert_eq!((status, body.as_str()), (200, "test b"));
    // Identities that would leave the Azure front without credentials are refused and
    // the ones in use stay.
    let keyless =
        IdentitiesFile::parse(r#"{"s3": [{"access_key": "x", "secret_key": "y"}]}"#).unwrap();
    let err = gw
        .replace_identities(Identities::from_parts(keyless).unwrap())
        .unwrap_err();
    assert!(matches!(err, GatewayError::Config(_)), "{err}");
    let (status, _) = call("GET", "shared/test/b.bin", "").send(&reader).await;
    assert_eq!(status, 200);
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------
// Canned ACLs: public-read buckets (listed) and objects (read) without a signature.

#[tokio::test]
async fn canned_acls_open_a_bucket_to_listing_and_an_object_to_reading_and_outlive_a_restart() {
    let stub = stub_with_buckets().await;
    let acl_dir = tempfile::tempdir().unwrap();
    let start = || {
        // The Azure key administers every container here (it re-creates one below).
        let text = GRANTS_FILE.replace("KEY", EMULATOR_AZURE_KEY).replace(
            r#""grants": [{"bucket": "shared", "actions": ["read", "list", "write"]}]"#,
            r#""grants": [{"bucket": "*", "actions": ["read", "list", "write", "delete", "admin"]}]"#,
        );
        let mut config = config(&stub, IdentitiesFile::parse(&text).unwrap());
        config.acl_file = Some(acl_dir.path().join("acls.json"));
        talon_gateway::start(config)
    };
    let gw = start().await.unwrap();
    let admin = s3_client(&gw, Some(("admin", "a")));
    let writer = s3_client(&gw, Some(("writer", "w")));
    let anonymous = s3_client(&gw, None);
    let s = &stub;
    let public = |c: Call<'static>| c.header("x-amz-acl", "public-read");

    // A bucket created public-read: anyone may list it, nobody may read its objects.
    expect(
        s,
        &admin,
        "admin creates public",
        public(call("PUT", "pub", "")),
        200,
        "",
    )
    .await;
    expect(
        s,
        &writer,
        "writer makes shared public",
        public(call("PUT", "shared", "acl")),
        403,
        "AccessDenied",
    )
    .await;
    expect(
        s,
        &admin,
        "admin writes an object",
        call("PUT", "pub/k.txt", "").body("hello"),
        200,
        "",
    )
    .await;
    expect(
        s,
        &anonymous,
        "anonymous lists",
        call("GET", "pub", "list-type=2"),
        200,
        "",
    )
    .await;
    expect(
        s,
        &anonymous,
        "anonymous reads a private object",
        call("GET", "pub/k.txt", ""),
        403,
        "AccessDenied",
    )
    .await;
    // A public object is read; the writer may write in `shared` but not make it public.
    let public_put = public(call("PUT", "shared/p.txt", "").body("p"));
    expect(
        s,
        &writer,
        "writer PUTs public-read",
        public_put,
        403,
        "AccessDenied",
    )
    .await;
    expect(
        s,
        &admin,
        "admin makes k public",
        public(call("PUT", "pub/k.txt", "acl")),
        200,
        "",
    )
    .await;
    assert_eq!(
        call("GET", "pub/k.txt", "").send(&anonymous).await,
        (200, "hello".to_owned())
    );
    let (_, acl) = call("GET", "pub/k.txt", "acl").send(&admin).await;
    assert!(
        acl.contains("groups/global/AllUsers</URI></Grantee><Permission>READ"),
        "{acl}"
    );

    // It outlives a restart of the gateway.
    gw.shutdown().await;
    let gw = start().await.unwrap();
    let admin = s3_client(&gw, Some(("admin", "a")));
    let anonymous = s3_client(&gw, None);
    assert_eq!(
        call("GET", "pub/k.txt", "").send(&anonymous).await,
        (200, "hello".to_owned())
    );

    // Written again without an ACL, the object is private again.
    expect(
        s,
        &admin,
        "admin rewrites k",
        call("PUT", "pub/k.txt", "").body("again"),
        200,
        "",
    )
    .await;
    expect(
        s,
        &anonymous,
        "anonymous reads rewritten k",
        call("GET", "pub/k.txt", ""),
        403,
        "AccessDenied",
    )
    .await;
    // A deleted public object is NoSuchKey to whoever may list the bucket (as S3 answers).
    expect(
        s,
        &admin,
        "admin PUTs public",
        public(call("PUT", "pub/gone.txt", "").body("g")),
        200,
        "",
    )
    .await;
    expect(
        s,
        &admin,
        "admin deletes it",
        call("DELETE", "pub/gone.txt", ""),
        204,
        "",
    )
    .await;
    let (status, body) = call("GET", "pub/gone.txt", "").send(&anonymous).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("<Code>NoSuchKey</Code>"), "{body}");
    // A deleted public bucket is NoSuchBucket; a bucket nobody opened stays a refusal.
    expect(
        s,
        &admin,
        "admin deletes k",
        call("DELETE", "pub/k.txt", ""),
        204,
        "",
    )
    .await;
    expect(
        s,
        &admin,
        "admin deletes pub",
        call("DELETE", "pub", ""),
        204,
        "",
    )
    .await;
    let (status, body) = call("GET", "pub/k.txt", "").send(&anonymous).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("<Code>NoSuchBucket</Code>"), "{body}");
    // Made again through the Azure front, the container is private.
    let (status, body) = call("PUT", "pub", "restype=container")
        .send(&azure_client(&gw, true, None))
        .await;
    assert_eq!(status, 201, "{body}");
    expect(
        s,
        &anonymous,
        "anonymous lists re-made pub",
        call("GET", "pub", "list-type=2"),
        403,
        "AccessDenied",
    )
    .await;
    let (status, _) = call("GET", "never/k.txt", "").send(&anonymous).await;
    assert_eq!(status, 403);
    // Made private again, the bucket is closed to listing.
    expect(
        s,
        &admin,
        "admin creates pub2",
        public(call("PUT", "pub2", "")),
        200,
        "",
    )
    .await;
    expect(
        s,
        &admin,
        "admin makes pub2 private",
        call("PUT", "pub2", "acl").header("x-amz-acl", "private"),
        200,
        "",
    )
    .await;
    expect(
        s,
        &anonymous,
        "anonymous lists pub2",
        call("GET", "pub2", "list-type=2"),
        403,
        "AccessDenied",
    )
    .await;
    // Only private and public-read are kept.
    let rw = call("PUT", "pub2", "acl").header("x-amz-acl", "public-read-write");
    expect(s, &admin, "public-read-write", rw, 501, "").await;
    gw.shutdown().await;
}

#[tokio::test]
async fn without_an_acl_file_only_private_is_accepted() {
    let stub = stub_with_buckets().await;
    let gw = gateway_with_grants(&stub).await;
    let admin = s3_client(&gw, Some(("admin", "a")));
    let before = origin_files(&stub);
    let (status, body) = call("PUT", "shared", "acl")
        .header("x-amz-acl", "public-read")
        .send(&admin)
        .await;
    assert_eq!(status, 501, "{body}");
    let (status, body) = call("PUT", "shared/x.txt", "")
        .header("x-amz-acl", "public-read")
        .body("x")
        .send(&admin)
        .await;
    assert_eq!(status, 501, "{body}");
    assert_eq!(origin_files(&stub), before);
    let private = call("PUT", "shared/x.txt", "")
        .header("x-amz-acl", "private")
        .body("x");
    assert_eq!(private.send(&admin).await.0, 200);
    // `private` is what everything already is: accepted, nothing kept.
    let (status, body) = call("PUT", "shared", "acl")
        .header("x-amz-acl", "private")
        .send(&admin)
        .await;
    assert_eq!(status, 200, "{body}");
    // ACLs of explicit grants are refused, not ignored.
    let before = origin_files(&stub);
    let (status, body) = call("PUT", "shared/g.txt", "")
        .header(
            "x-amz-grant-read",
            "uri=\"http://acs.amazonaws.com/groups/global/AllUsers\"",
        )
        .body("g")
        .send(&admin)
        .await;
    assert_eq!(status, 501, "{body}");
    assert_eq!(origin_files(&stub), before);
    gw.shutdown().await;
}

/// What a helper's review of the grants found (2026-12-05), each refused: a listing
/// with two prefixes (the policy reads the first, a relayed query reaches an origin
/// that may read the last); a copy source with dot segments or under the gateway's
/// staging prefix (relayed copies forward the header as sent); and a caller who may list
/// one prefix learns nothing of keys outside it (refused whether they exist or not).
#[tokio::test]
async fn a_second_prefix_a_dotted_copy_source_and_existence_outside_a_prefix_are_refused() {
    let stub = stub_with_buckets().await;
    let gw = gateway_with_grants(&stub).await;
    let reader = s3_client(&gw, Some(("reader", "r")));
    let writer = s3_client(&gw, Some(("writer", "w")));
    let copy = |from: &str| {
        call("PUT", "shared/copy.bin", "").header("x-amz-copy-source", from.to_owned())
    };
    let refusals = [
        (
            &reader,
            "two prefixes",
            call("GET", "shared", "versions&prefix=train%2F&prefix="),
            400,
            "InvalidArgument",
        ),
        (
            &reader,
            "two prefixes, V2",
            call("GET", "shared", "list-type=2&prefix=train%2F&prefix="),
            400,
            "InvalidArgument",
        ),
        (
            &writer,
            "dotted source",
            copy("/shared/train/%2E%2E/test/b.bin"),
            400,
            "InvalidArgument",
        ),
        (
            &writer,
            "dotted source, plain",
            copy("/shared/train/../test/b.bin"),
            400,
            "InvalidArgument",
        ),
        (
            &writer,
            "staged source",
            copy("/shared/.talon-blocks/x"),
            403,
            "AccessDenied",
        ),
        (
            &reader,
            "existing, outside",
            call("GET", "shared/test/b.bin", ""),
            403,
            "AccessDenied",
        ),
        (
            &reader,
            "missing, outside",
            call("GET", "shared/test/missing.bin", ""),
            403,
            "AccessDenied",
        ),
    ];
    for (who, what, c, status, code) in refusals {
        let before = origin_files(&stub);
        let (got, body) = c.send(who).await;
        assert_eq!(got, status, "{what}: {body}");
        assert!(
            body.contains(&format!("<Code>{code}</Code>")),
            "{what}: {body}"
        );
        assert_eq!(origin_files(&stub), before, "{what} changed the origin");
    }
    // Inside its prefix the reader is told what is missing.
    let (status, body) = call("GET", "shared/train/missing.bin", "")
        .send(&reader)
        .await;
    assert_eq!(status, 404, "{body}");
    gw.shutdown().await;
}

/// A prefix grant cannot be escaped with dot segments: `train/../test/b.bin` starts with
/// `train/`, but the URL standard resolves it (percent-encoded too) to `test/b.bin`, so
/// both fronts refuse any key with a `.` or `..` segment before the policy or the origin
/// sees it. Sent on a raw socket: HTTP clients resolve such paths before sending.
#[tokio::test]
async fn dot_segments_cannot_escape_a_prefix_grant() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stub = stub_with_buckets().await;
    let file = IdentitiesFile::parse(&format!(
        r#"{{"s3": [{{"access_key": "AK", "secret_key": "SK"}}],
            "azure": {{"account": "{ACCOUNT}", "key": "{EMULATOR_AZURE_KEY}"}},
            "public": [{{"bucket": "shared", "prefix": "train/", "actions": ["read"]}}]}}"#
    ))
    .unwrap();
    let gw = talon_gateway::start(config(&stub, file)).await.unwrap();
    let before = origin_files(&stub);
    let raw_get = |addr: std::net::SocketAddr, path: String| async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nx-ms-version: 2021-08-06\r\nConnection: close\r\n\r\n"
        );
        s.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.unwrap();
        answer
    };
    let s3 = gw.s3_addr.unwrap();
    let az = gw.azure_addr.unwrap();
    assert!(
        raw_get(s3, "/shared/train/a.bin".into())
            .await
            .ends_with("train a")
    );
    for (addr, path) in [
        (s3, "/shared/train/../test/b.bin".to_owned()),
        (s3, "/shared/train/%2E%2E/test/b.bin".to_owned()),
        (s3, "/shared/train/./../test/b.bin".to_owned()),
        (az, format!("/{ACCOUNT}/shared/train/../test/b.bin")),
        (az, format!("/{ACCOUNT}/shared/train/%2e%2e/test/b.bin")),
    ] {
        let answer = raw_get(addr, path.clone()).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{path}: {answer}");
        assert!(!answer.contains("test b"), "{path}: {answer}");
    }
    assert_eq!(origin_files(&stub), before);
    gw.shutdown().await;
}

/// A refusal costs the origin nothing for a caller without a `list` grant in the bucket,
/// and at most one request (the bucket's HEAD, to answer NoSuchBucket) for one with it.
#[tokio::test]
async fn a_refusal_costs_the_origin_nothing_unless_the_caller_may_list_there() {
    let stub = stub_with_buckets().await;
    let gw = gateway_with_grants(&stub).await;
    let requests = || stub.metrics().requests_total();
    for (who, path, most) in [
        (
            s3_client(&gw, Some(("nobody", "n"))),
            "shared/train/a.bin",
            0,
        ),
        (s3_client(&gw, None), "shared/train/a.bin", 0),
        (
            s3_client(&gw, Some(("writer", "w"))),
            "private/secret.bin",
            0,
        ),
        (
            s3_client(&gw, Some(("reader", "r"))),
            "shared/test/b.bin",
            1,
        ),
    ] {
        let before = requests();
        let (status, body) = call("GET", path, "").send(&who).await;
        assert_eq!(status, 403, "{path}: {body}");
        let sent = requests() - before;
        assert!(sent <= most, "{path}: {sent} origin requests for a refusal");
    }
    gw.shutdown().await;
}
