//! `dataplane_benches`: one client, one resident block, serial 64 KiB reads over
//! loopback TCP, against each data plane (io_uring rings, when this host has them, and
//! Tokio).
//!
//! This is a per-request latency floor (frame decode, block lookup, page check, sendfile
//! of 64 KiB, the client's read), not a throughput or scaling figure: with one request in
//! flight nothing is batched or overlapped. Load under concurrency is measured by the
//! load generator, not here.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use talon_core::wire::{HEADER_LEN, ReadRangeRequest};
use talon_core::{BlockId, Message, ObjectId, ObjectVersion};
use talon_origin_stub::generated::GeneratedObject;
use talon_origin_stub::{StubConfig, start as start_stub};
use talon_protocols::origin::{OriginClient, OriginConfig, Origins};
use talon_worker::WorkerConfig;
use talon_worker::data_plane::{DataPlaneConfig, PlaneKind, PlaneRequest};
use talon_worker::loader::LoaderConfig;

const BLOCK: u64 = 4 << 20;
const PAGE: u64 = 64 << 10;
const READ: u32 = 64 << 10;

fn secret() -> talon_core::cluster_auth::ClusterSecret {
    talon_core::cluster_auth::ClusterSecret::new(b"the data-plane bench's secret").expect("secret")
}

fn serial_reads(c: &mut Criterion) {
    let mut group = c.benchmark_group("dataplane");
    group.throughput(Throughput::Bytes(u64::from(READ)));
    for plane in [PlaneRequest::Default, PlaneRequest::ForceTokio] {
        serial_reads_on(&mut group, plane);
    }
    group.finish();
}

fn serial_reads_on(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    plane: PlaneRequest,
) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let object = GeneratedObject::new("bench", "block.bin", BLOCK, 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let (addr, kind, _stub, _worker) = runtime.block_on(async {
        let stub = start_stub(StubConfig {
            generated: vec![object.clone()],
            ..StubConfig::default()
        })
        .await
        .expect("stub");
        let origins = Origins {
            s3: Some(
                OriginClient::new(OriginConfig::S3 {
                    endpoint: stub.s3_url().expect("s3"),
                    region: "us-east-1".into(),
                    credentials: None,
                    virtual_hosted: false,
                })
                .expect("client"),
            ),
            azure: None,
        };
        let worker = talon_worker::start(WorkerConfig {
            pins: Default::default(),
            listen: "127.0.0.1:0".parse().expect("addr"),
            admin_listen: None,
            cache_dir: dir.path().to_owned(),
            capacity_bytes: 64 << 20,
            page_size: PAGE,
            origins,
            stat_ttl: Duration::from_secs(60),
            negative_stat_ttl: Duration::from_secs(1),
            metadata: talon_worker::origins::DEFAULT_STAT_CACHE_LIMITS,
            loader: LoaderConfig::default(),
            data_plane: DataPlaneConfig {
                plane,
                ..DataPlaneConfig::default()
            },
            membership: None,
            local_socket: None,
            cluster_secret: secret(),
            open_files: None,
            max_blocks: talon_worker::block_store::DEFAULT_MAX_BLOCKS,
        })
        .await
        .expect("worker");
        (worker.addr, worker.plane, stub, worker)
    });
    if plane == PlaneRequest::Default && kind == PlaneKind::Tokio {
        // No io_uring on this host: the Tokio row below is the only one.
        return;
    }
    let block = BlockId::new(
        ObjectId::s3("bench", "block.bin").expect("id"),
        ObjectVersion::from_etag(&object.etag()).expect("version"),
        0,
        BLOCK,
    )
    .expect("block");
    // Authenticated once, as every reader's connection is; the loop is plain frames.
    let mut conn = runtime.block_on(async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        talon_cache_client::hello::authenticate(
            &mut stream,
            &secret(),
            talon_core::cluster_auth::Role::Reader,
            None,
            Duration::from_secs(5),
        )
        .await
        .expect("hello");
        let std = stream.into_std().expect("std stream");
        std.set_nonblocking(false).expect("blocking");
        std
    });
    conn.set_nodelay(true).expect("nodelay");
    let mut buf = vec![0u8; HEADER_LEN + READ as usize];
    let mut read_at = |offset: u64, conn: &mut TcpStream, id: u32| {
        let req = Message::ReadRange(ReadRangeRequest {
            block: block.clone(),
            object_size: BLOCK,
            offset,
            len: READ,
        });
        conn.write_all(&req.encode(id).expect("encode"))
            .expect("send");
        conn.read_exact(&mut buf).expect("reply");
    };
    // Warm the whole block (the miss path is not what this measures).
    for (i, offset) in (0..BLOCK).step_by(READ as usize).enumerate() {
        read_at(offset, &mut conn, i as u32 + 1);
    }
    let mut id = 1_000u32;
    let mut offset = 0u64;
    group.bench_function(format!("{}/serial_read_64KiB", kind.name()), |b| {
        b.iter(|| {
            id = id.wrapping_add(1);
            offset = (offset + u64::from(READ)) % BLOCK;
            read_at(offset, &mut conn, id);
        })
    });
}

criterion_group!(benches, serial_reads);
criterion_main!(benches);
