//! A worker's metadata cache never tells a reader that an answer is younger than it is
//! (the read review's RP-02): a Stat that needs metadata newer than the origin request
//! already in flight does not join it, and every answer's age counts from when its
//! origin request was sent. Against the origin stub behind a fault proxy that holds
//! the origin's answers, as a far or busy link does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use talon_core::Backend;
use talon_core::ObjectId;
use talon_origin_stub::StubConfig;
use talon_protocols::conditional::same_version;
use talon_protocols::origin::{OriginClient, OriginConfig, Origins};
use talon_testkit::fault_proxy::{Fault, FaultProxy};
use talon_testkit::wait_for;
use talon_worker::origins::StatCache;

fn s3_client(endpoint: String) -> OriginClient {
    OriginClient::new(OriginConfig::S3 {
        endpoint,
        region: "us-east-1".into(),
        credentials: None,
        virtual_hosted: false,
    })
    .unwrap()
}

/// The scenario of the review, step by step: a revalidation's answer (v1) is on its
/// way; the object is overwritten (v2) and the write acknowledged; a reader that must
/// see that write asks. It gets v2 (it did not join the HEAD sent before the write), the
/// first caller is told the true age of v1 (the whole time its answer was held), and
/// the table keeps v2, the later of the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stat_needing_newer_metadata_than_the_fetch_in_flight_does_not_join_it() {
    let stub = talon_origin_stub::start(StubConfig {
        azure_listen: None,
        admin_listen: None,
        ..StubConfig::default()
    })
    .await
    .unwrap();
    let direct = s3_client(stub.s3_url().unwrap());
    direct.create_bucket("bkt").await.unwrap();
    let v1 = direct
        .put("bkt", "obj", Bytes::from_static(b"version one"), None)
        .await
        .unwrap();
    let proxy = FaultProxy::bind().await;
    proxy.forward_to(
        stub.s3_url()
            .unwrap()
            .trim_start_matches("http://")
            .parse()
            .unwrap(),
    );
    let origins = Arc::new(Origins {
        s3: Some(s3_client(format!("http://{}", proxy.addr()))),
        azure: None,
    });
    let cache = Arc::new(StatCache::new(
        origins,
        Duration::from_secs(60),
        Duration::from_secs(1),
    ));
    let object = ObjectId::from_key_path("s3/bkt/obj").unwrap();

    // A's HEAD is answered by the origin (v1), and the answer is held on its way.
    proxy.set(Fault::StallAfter(0));
    let a = {
        let (cache, object) = (cache.clone(), object.clone());
        tokio::spawn(async move { cache.stat_within(&object, None).await.unwrap() })
    };
    wait_for(
        "the origin to answer A's HEAD",
        Duration::from_secs(10),
        || async { (proxy.received_bytes() > 0).then_some(()) },
    )
    .await;
    let held = Instant::now();

    // The write, acknowledged by the origin.
    let v2 = direct
        .put("bkt", "obj", Bytes::from_static(b"version two!"), None)
        .await
        .unwrap();
    assert!(!same_version(&v1, &v2));
    // B must see it: nothing learned before now.
    let b = {
        let (cache, object) = (cache.clone(), object.clone());
        tokio::spawn(async move {
            cache
                .stat_within(&object, Some(Duration::ZERO))
                .await
                .unwrap()
        })
    };
    proxy.set(Fault::Pass);
    let released = held.elapsed();
    let (b_info, _) = b.await.unwrap();
    assert!(
        same_version(&b_info.etag, &v2),
        "a stat after an acknowledged write was answered with the version before it \
         ({} instead of {v2})",
        b_info.etag
    );
    let (a_info, a_age) = a.await.unwrap();
    assert!(same_version(&a_info.etag, &v1));
    assert!(
        a_age >= released,
        "v1 was held {released:?} on its way, and told {a_age:?} old"
    );
    let (kept, _) = cache
        .stat_within(&object, Some(Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(
        same_version(&kept.etag, &v2),
        "the table kept the earlier answer"
    );
    assert_eq!(
        stub.metrics().requests_of(Backend::S3, "HeadObject"),
        2,
        "one HEAD each for A and B, and the last stat from memory"
    );
}
