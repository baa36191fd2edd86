//! One conformance suite for the origin client, portable across origins: it makes its
//! own bucket and objects, so it runs unchanged against the origin stub (both
//! protocols), moto's S3 server and Azurite ([`crate::independent_origins`]). What it
//! checks is what a reader of that origin sees: sizes, quoted ETags, bytes, ranges,
//! reads pinned to a version, listings with prefixes, delimiters and pages, overwrites,
//! deletes, the error kinds of missing buckets and keys, and, at an Azure origin, block
//! uploads. Where S3 and Azure differ (a delete of a missing key), each origin is held
//! to what its own protocol says.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures_util::StreamExt as _;
use talon_protocols::azure::xml::BlockListItem;
use talon_protocols::origin::{ListOptions, OriginBody, OriginClient, OriginConfig};
use talon_protocols::range::ByteRange;
use talon_protocols::{Error, ErrorKind};

/// Test bytes that are not all alike: a counter mixed with a tag.
fn pattern(len: usize, tag: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ tag ^ ((i >> 8) as u8))
        .collect::<Vec<u8>>()
        .into()
}

async fn drain(resp: talon_protocols::origin::GetResponse) -> Result<Vec<u8>, Error> {
    let mut body = resp.body;
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        out.extend_from_slice(&chunk?);
    }
    Ok(out)
}

fn kind<T>(r: Result<T, Error>) -> ErrorKind {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.kind(),
    }
}

fn is_azure(client: &OriginClient) -> bool {
    matches!(client.config(), OriginConfig::Azure { .. })
}

/// Creates a bucket (container).
///
/// # Panics
/// When the origin refuses.
pub async fn create_bucket(client: &OriginClient, bucket: &str) {
    client
        .create_bucket(bucket)
        .await
        .unwrap_or_else(|e| panic!("create bucket {bucket}: {e}"));
}

/// Every key of a listing, page by page (`page` keys each), with the delimiter's
/// prefixes.
async fn list_all(
    client: &OriginClient,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    page: usize,
) -> (Vec<(String, u64, String)>, Vec<String>) {
    let (mut objects, mut prefixes) = (Vec::new(), Vec::new());
    let mut token: Option<String> = None;
    for _ in 0..10_000 {
        let result = client
            .list_with(
                bucket,
                &ListOptions {
                    prefix,
                    delimiter,
                    token: token.as_deref(),
                    start_after: None,
                    max_keys: Some(page),
                    include_metadata: false,
                },
            )
            .await
            .expect("listing");
        assert!(result.objects.len() + result.common_prefixes.len() <= page);
        objects.extend(result.objects.into_iter().map(|o| (o.key, o.size, o.etag)));
        prefixes.extend(result.common_prefixes);
        match result.next_token {
            Some(t) => token = Some(t),
            None => return (objects, prefixes),
        }
    }
    panic!("a listing that never ends");
}

/// Something an origin nobody here wrote is known not to do as its protocol says,
/// which the suite then leaves unchecked there (the caller says why, where it runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnownGap {
    /// A copy's conditions (`x-amz-copy-source-if-match`, a destination's
    /// `If-None-Match`) are ignored.
    CopyConditions,
}

/// Runs the suite against `client`, in a fresh bucket named `bucket`.
///
/// # Panics
/// On the first difference from what the origin's protocol says.
pub async fn run(client: &OriginClient, bucket: &str) {
    run_except(client, bucket, &[]).await;
}

/// [`run`], leaving `gaps` unchecked.
///
/// # Panics
/// On the first difference from what the origin's protocol says.
pub async fn run_except(client: &OriginClient, bucket: &str, gaps: &[KnownGap]) {
    let azure = is_azure(client);
    create_bucket(client, bucket).await;
    client.head_bucket(bucket).await.expect("head bucket");
    assert!(
        client
            .list_buckets()
            .await
            .expect("list buckets")
            .iter()
            .any(|b| b.name == bucket)
    );
    let missing_bucket = format!("{bucket}-missing");
    assert_eq!(
        kind(client.head_bucket(&missing_bucket).await),
        ErrorKind::NoSuchBucket
    );
    assert_eq!(
        kind(client.get(&missing_bucket, "k", None, None).await),
        ErrorKind::NoSuchBucket
    );

    // Objects of every shape, written two ways.
    let objects: BTreeMap<&str, Bytes> = [
        ("empty", Bytes::new()),
        ("small.txt", pattern(1024, 1)),
        ("dir/a", pattern(10, 2)),
        ("dir/b", pattern(20, 3)),
        ("dir/sub/c", pattern(30, 4)),
        ("odd key +%é", pattern(40, 5)),
        ("big.bin", pattern((3 << 20) + 7, 6)),
    ]
    .into_iter()
    .collect();
    let mut etags = BTreeMap::new();
    for (key, body) in &objects {
        let etag = if key.starts_with("big") {
            let len = body.len() as u64;
            client
                .put_stream(bucket, key, reqwest::Body::from(body.clone()), len, &[])
                .await
        } else {
            client
                .put(bucket, key, body.clone(), Some("application/x-conformance"))
                .await
        }
        .unwrap_or_else(|e| panic!("put {key}: {e}"));
        assert!(
            etag.starts_with('"') && etag.ends_with('"'),
            "{key}: {etag}"
        );
        etags.insert(*key, etag);
    }
    for (key, body) in &objects {
        let info = client.head(bucket, key).await.expect("head");
        assert_eq!(
            (info.size, &info.etag),
            (body.len() as u64, &etags[key]),
            "{key}"
        );
        let got = drain(client.get(bucket, key, None, None).await.expect("get")).await;
        assert_eq!(got.expect("body"), body.as_ref(), "{key}");
    }
    assert_eq!(
        client
            .head(bucket, "small.txt")
            .await
            .expect("the origin answers")
            .content_type
            .as_deref(),
        Some("application/x-conformance")
    );

    // Ranges and reads pinned to a version.
    let big = &objects["big.bin"];
    let len = big.len() as u64;
    for (start, end) in [(0, 1), (1 << 20, (2 << 20) + 3), (len - 1, len), (0, len)] {
        let range = ByteRange { start, end };
        let got = client
            .get_pinned_range(bucket, "big.bin", range, &etags["big.bin"])
            .await
            .unwrap_or_else(|e| panic!("range {start}..{end}: {e}"));
        assert_eq!(got.as_ref(), &big[start as usize..end as usize]);
    }
    assert_eq!(
        kind(
            client
                .get_pinned_range(
                    bucket,
                    "big.bin",
                    ByteRange { start: 0, end: 10 },
                    "\"0123456789abcdef0123456789abcdef\""
                )
                .await
        ),
        ErrorKind::PreconditionFailed
    );
    assert_eq!(
        kind(
            client
                .get(
                    bucket,
                    "big.bin",
                    Some(ByteRange {
                        start: len + 10,
                        end: len + 20
                    }),
                    None
                )
                .await
        ),
        ErrorKind::InvalidRange
    );

    // Listings: everything in order, a folder with its subfolder rolled up, pages of two.
    let mut all: Vec<&str> = objects.keys().copied().collect();
    all.sort_unstable();
    let (listed, prefixes) = list_all(client, bucket, "", None, 1000).await;
    assert_eq!(listed.iter().map(|o| o.0.as_str()).collect::<Vec<_>>(), all);
    assert!(prefixes.is_empty());
    for (key, size, etag) in &listed {
        assert_eq!(
            (size, etag),
            (&(objects[key.as_str()].len() as u64), &etags[key.as_str()]),
            "{key}"
        );
    }
    let (paged, _) = list_all(client, bucket, "", None, 2).await;
    assert_eq!(paged, listed, "pages of two list the same");
    let (folder, sub) = list_all(client, bucket, "dir/", Some("/"), 1000).await;
    assert_eq!(
        folder.iter().map(|o| o.0.as_str()).collect::<Vec<_>>(),
        ["dir/a", "dir/b"]
    );
    assert_eq!(sub, ["dir/sub/"]);
    let (top, top_prefixes) = list_all(client, bucket, "", Some("/"), 1000).await;
    assert!(top.iter().all(|o| !o.0.contains('/')));
    assert_eq!(top_prefixes, ["dir/"]);

    // An overwrite is a new version; a read pinned to the old one is refused.
    let new_body = pattern(77, 9);
    let new_etag = client
        .put(bucket, "dir/a", new_body.clone(), None)
        .await
        .expect("the origin answers");
    assert_ne!(new_etag, etags["dir/a"]);
    assert_eq!(
        kind(
            client
                .get_pinned_range(
                    bucket,
                    "dir/a",
                    ByteRange { start: 0, end: 5 },
                    &etags["dir/a"]
                )
                .await
        ),
        ErrorKind::PreconditionFailed
    );
    let got = client
        .get_pinned_range(bucket, "dir/a", ByteRange { start: 0, end: 77 }, &new_etag)
        .await
        .expect("the origin answers");
    assert_eq!(got, new_body);

    // Deletes: the key is gone for every reader; a missing key as each protocol says.
    client.delete(bucket, "dir/b").await.expect("delete");
    assert_eq!(
        kind(client.head(bucket, "dir/b").await),
        ErrorKind::NoSuchKey
    );
    assert_eq!(
        kind(client.get(bucket, "dir/b", None, None).await),
        ErrorKind::NoSuchKey
    );
    let again = client.delete(bucket, "dir/b").await;
    if azure {
        assert_eq!(kind(again), ErrorKind::NoSuchKey, "Azure: 404 BlobNotFound");
    } else {
        again.expect("S3 deletes a missing key without complaint");
    }
    assert_eq!(
        kind(client.head(bucket, "never-there").await),
        ErrorKind::NoSuchKey
    );

    if azure {
        blocks(client, bucket).await;
    }
    copies(
        client,
        bucket,
        &objects,
        !gaps.contains(&KnownGap::CopyConditions),
    )
    .await;

    // Buckets: a second create is refused (Azure) or refused or accepted (S3, where
    // us-east-1 answers 200 to the owner, as AWS and moto do); an empty bucket deletes.
    match client.create_bucket(bucket).await {
        Err(e) => assert_eq!(e.kind(), ErrorKind::BucketAlreadyExists),
        Ok(()) => assert!(!azure, "Azure refuses an existing container"),
    }
    assert_eq!(
        client
            .head(bucket, "small.txt")
            .await
            .expect("the origin answers")
            .size,
        1024,
        "a second create leaves the bucket's objects"
    );
    let empty = format!("{bucket}-empty");
    create_bucket(client, &empty).await;
    client
        .delete_bucket(&empty)
        .await
        .expect("delete an empty bucket");
    assert_eq!(
        kind(client.head_bucket(&empty).await),
        ErrorKind::NoSuchBucket
    );
}

/// Server-side copies: the bytes and (by default) the source's properties; new
/// metadata where asked; a failed source or destination condition refused with nothing
/// written.
async fn copies(
    client: &OriginClient,
    bucket: &str,
    objects: &BTreeMap<&str, Bytes>,
    conditions: bool,
) {
    use talon_protocols::conditional::{Conditions, EtagList};
    use talon_protocols::origin::CopiedProperties;
    let none = Conditions::default();
    let from = (bucket, "big.bin");
    let copied = client
        .copy(
            (bucket, "copy/of big"),
            from,
            &none,
            &none,
            CopiedProperties::Source,
        )
        .await
        .expect("copy");
    let head = client.head(bucket, "copy/of big").await.expect("head");
    assert_eq!(
        head.etag, copied.etag,
        "the copy's answer names its version"
    );
    let got = drain(
        client
            .get(bucket, "copy/of big", None, None)
            .await
            .expect("get"),
    )
    .await
    .expect("body");
    assert_eq!(got, objects["big.bin"]);
    let meta_header = if is_azure(client) {
        "x-ms-meta-k"
    } else {
        "x-amz-meta-k"
    };
    let mut replace = vec![(meta_header.to_owned(), "v".to_owned())];
    if !is_azure(client) {
        replace.push((
            "content-type".to_owned(),
            "application/octet-stream".to_owned(),
        ));
    }
    client
        .copy(
            (bucket, "copy/meta"),
            (bucket, "small.txt"),
            &none,
            &none,
            CopiedProperties::Replace(&replace),
        )
        .await
        .expect("copy with metadata");
    let head = client.head(bucket, "copy/meta").await.expect("head");
    assert_eq!(
        head.headers.user_metadata,
        vec![("k".to_owned(), "v".to_owned())]
    );
    if conditions {
        let source_changed = Conditions {
            if_match: Some(EtagList::parse("\"0123\"")),
            ..Conditions::default()
        };
        assert_eq!(
            kind(
                client
                    .copy(
                        (bucket, "copy/never"),
                        from,
                        &source_changed,
                        &none,
                        CopiedProperties::Source
                    )
                    .await
            ),
            ErrorKind::PreconditionFailed
        );
        let exists = Conditions {
            if_none_match: Some(EtagList::Any),
            ..Conditions::default()
        };
        let refused = client
            .copy(
                (bucket, "copy/meta"),
                from,
                &none,
                &exists,
                CopiedProperties::Source,
            )
            .await;
        assert_eq!(kind(refused), ErrorKind::PreconditionFailed);
        assert_eq!(
            client.head(bucket, "copy/meta").await.expect("head").size,
            1024,
            "a refused copy leaves the destination"
        );
    }
    assert_eq!(
        kind(client.head(bucket, "copy/never").await),
        ErrorKind::NoSuchKey
    );
    assert_eq!(
        kind(
            client
                .copy(
                    (bucket, "copy/never"),
                    (bucket, "never-there"),
                    &none,
                    &none,
                    CopiedProperties::Source
                )
                .await
        ),
        ErrorKind::NoSuchKey
    );
    for key in ["copy/of big", "copy/meta"] {
        client.delete(bucket, key).await.expect("delete copy");
    }
}

/// Azure block uploads: staged blocks listed as uncommitted, a list committed in its
/// own order, a missing block refused with nothing changed.
async fn blocks(client: &OriginClient, bucket: &str) {
    let ids = ["YmxvY2stMDAx", "YmxvY2stMDAy"]; // "block-001", "block-002"
    client
        .put_block(
            bucket,
            "blocks",
            ids[0],
            OriginBody::Bytes(pattern(100, 11)),
        )
        .await
        .expect("put block");
    client
        .put_block(bucket, "blocks", ids[1], OriginBody::Bytes(pattern(50, 12)))
        .await
        .expect("put block");
    let lists = client
        .get_block_list(bucket, "blocks")
        .await
        .expect("block list");
    assert!(lists.committed.is_empty());
    let mut uncommitted = lists.uncommitted.clone();
    uncommitted.sort();
    assert_eq!(
        uncommitted,
        [(ids[0].to_owned(), 100), (ids[1].to_owned(), 50)]
    );
    let items = [
        BlockListItem::Latest(ids[1].to_owned()),
        BlockListItem::Uncommitted(ids[0].to_owned()),
    ];
    let etag = client
        .put_block_list(
            bucket,
            "blocks",
            &items,
            &[("x-ms-blob-content-type", "text/x-blocks".to_owned())],
        )
        .await
        .expect("put block list");
    let info = client
        .head(bucket, "blocks")
        .await
        .expect("the origin answers");
    assert_eq!((info.size, info.etag.as_str()), (150, etag.as_str()));
    assert_eq!(info.content_type.as_deref(), Some("text/x-blocks"));
    let got = drain(
        client
            .get(bucket, "blocks", None, None)
            .await
            .expect("the origin answers"),
    )
    .await
    .expect("the origin answers");
    let mut expected = pattern(50, 12).to_vec();
    expected.extend_from_slice(&pattern(100, 11));
    assert_eq!(got, expected);
    let lists = client
        .get_block_list(bucket, "blocks")
        .await
        .expect("the origin answers");
    assert_eq!(
        lists.committed,
        [(ids[1].to_owned(), 50), (ids[0].to_owned(), 100)]
    );
    assert!(
        lists.uncommitted.is_empty(),
        "a commit drops the uncommitted blocks"
    );
    let refused = client
        .put_block_list(
            bucket,
            "blocks",
            &[BlockListItem::Uncommitted("YmxvY2stMDA5".to_owned())],
            &[],
        )
        .await;
    assert_eq!(
        kind(refused),
        ErrorKind::InvalidPart,
        "Azure: InvalidBlockList"
    );
    assert_eq!(
        client
            .head(bucket, "blocks")
            .await
            .expect("the origin answers")
            .etag,
        etag
    );
}
